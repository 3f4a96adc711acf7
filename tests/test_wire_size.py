"""The token column stays under 4 bytes per completion token, with log-probs within 1e-3, on realistic
rollouts (docs/protocol.md: the paper sends ~8 B/token).

Run: python -m pytest tests/test_wire_size.py -q

Self-contained: grade-school word problems and worked solutions come from templates written here, a
small byte-level BPE tokenizer is trained on them, and the sampler log-probs are drawn from the same
LLM-like mixture as ``benchmarks/wire.py`` (which measures the real figures, on GSM8K). Ids are
declared in Qwen2.5's 151,936-token vocabulary, so they travel in 3 bytes, as on a real run.
"""

from dataclasses import replace

import msgpack
import numpy as np
import pytest

from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
)

tokenizers = pytest.importorskip("tokenizers")

VOCAB_SIZE = 151_936
GROUP_SIZE = 8
LLM_MIXTURE = ((0.70, 0.01), (0.25, 0.7), (0.05, 3.0))  # (share of tokens, mean of -logprob), as the benchmark

NAMES = ["Janet", "Tom", "Aisha", "Marco", "Priya", "Liam", "Sofia", "Kenji", "Olga", "Ben"]
THINGS = [("apples", "apple"), ("stickers", "sticker"), ("eggs", "egg"), ("books", "book"), ("pencils", "pencil")]


def word_problem(rng: np.random.Generator) -> tuple[str, str]:
    """A question and its worked solution, in GSM8K's style: a few steps of arithmetic, then '#### n'."""
    name, friend = rng.choice(NAMES, size=2, replace=False)
    things, thing = THINGS[rng.integers(len(THINGS))]
    start, given, price, days = (int(v) for v in rng.integers([20, 1, 2, 2], [90, 19, 9, 8]))
    bought = int(rng.integers(2, 12)) * days
    kind = rng.integers(3)
    if kind == 0:
        question = (f"{name} has {start} {things}. {name} gives {given} {things} to {friend} and then buys "
                    f"{bought // days} more every day for {days} days. How many {things} does {name} have now?")
        left = start - given
        solution = (f"After giving {given} to {friend}, {name} has {start} - {given} = {left} {things}.\n"
                    f"{name} buys {bought // days} * {days} = {bought} {things} over {days} days.\n"
                    f"So {name} has {left} + {bought} = {left + bought} {things} now.\n#### {left + bought}")
    elif kind == 1:
        question = (f"{name} sells {start} {things} at ${price} per {thing}. {friend} sells {given} fewer {things} "
                    f"at the same price. How much money do they make together?")
        theirs = start - given
        solution = (f"{name} makes {start} * ${price} = ${start * price}.\n"
                    f"{friend} sells {start} - {given} = {theirs} {things}, which makes {theirs} * ${price} = "
                    f"${theirs * price}.\nTogether they make ${start * price} + ${theirs * price} = "
                    f"${(start + theirs) * price}.\n#### {(start + theirs) * price}")
    else:
        total = start * days
        question = (f"A shop packs {start} {things} into each box. It packs {days} boxes and {friend} takes "
                    f"{given} {things} out. How many {things} are left in the boxes?")
        solution = (f"The boxes hold {start} * {days} = {total} {things}.\n"
                    f"After {friend} takes {given}, there are {total} - {given} = {total - given} {things} left.\n"
                    f"#### {total - given}")
    return question, solution


def train_tokenizer(texts: list[str]) -> "tokenizers.Tokenizer":
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def llm_like_logprobs(rng: np.random.Generator, n: int) -> np.ndarray:
    shares, means = zip(*LLM_MIXTURE, strict=True)
    component = rng.choice(len(means), size=n, p=shares)
    return (-rng.exponential(np.asarray(means)[component])).astype(np.float32)


@pytest.fixture(scope="module")
def problems() -> list[tuple[np.ndarray, np.ndarray]]:
    """(question ids, solution ids) for 128 problems, tokenized by a BPE trained on 200 others."""
    rng = np.random.default_rng(0)
    train = [text for _ in range(200) for text in word_problem(rng)]
    tokenizer = train_tokenizer(train)
    pairs = [word_problem(rng) for _ in range(128)]
    encoded = tokenizer.encode_batch([text for pair in pairs for text in pair])
    ids = [np.array(e.ids, np.int64) for e in encoded]
    return list(zip(ids[0::2], ids[1::2], strict=True))


def make_batch(problems, id_map: np.ndarray, rng: np.random.Generator, num_groups: int = 16) -> RolloutBatch:
    """Groups of G distinct solutions (the question's own first), each solution in one group only."""
    groups = []
    for g in range(num_groups):
        members = [(g * GROUP_SIZE + c) % len(problems) for c in range(GROUP_SIZE)]
        completions = tuple(
            Completion(id_map[problems[m][1]], llm_like_logprobs(rng, len(problems[m][1])), float(c % 2), "stop")
            for c, m in enumerate(members)
        )
        groups.append(Group(f"group-{g:04d}", TaskRef("arith", "test", g, "0"), id_map[problems[members[0]][0]],
                            completions))
    return RolloutBatch(
        run_id="wire-size", peer_id="peer-0", round=0, created_at=1.7e9,
        policy=PolicyInfo("Qwen/Qwen2.5-1.5B-Instruct", "", "lora", 3),
        tokenizer=TokenizerInfo("sha256:" + "ab" * 32, VOCAB_SIZE),
        sampling=SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1024),
        groups=tuple(groups),
    )  # fmt: skip


def token_arrays(batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
    completions = [c for group in batch.groups for c in group.completions]
    ids = np.concatenate([g.prompt_ids for g in batch.groups] + [c.token_ids for c in completions])
    return ids, np.concatenate([c.sampler_logprobs for c in completions])


@pytest.mark.parametrize("layout", ["bpe_order", "scattered"])
def test_token_column_under_4_bytes_per_token_within_1e3(problems, layout):
    # "scattered": a random permutation spreads the ids over the whole vocabulary (the worst case for
    # compression); "bpe_order" keeps the tokenizer's ids, frequent tokens first, as real vocabularies do.
    rng = np.random.default_rng(1)
    id_map = rng.permutation(VOCAB_SIZE) if layout == "scattered" else np.arange(VOCAB_SIZE)
    for _ in range(3):
        batch = make_batch(problems, id_map, rng)
        data = encode(batch)
        column = msgpack.unpackb(data)["body"]["tokens"]
        assert column["id_width"] == 3
        # Prompt ids ride in the column too: counted in the bytes, not in the tokens.
        bytes_per_token = len(column["data"]) / batch.num_completion_tokens
        assert bytes_per_token <= 4.0, f"{bytes_per_token:.2f} B/token"
        ids, logprobs = token_arrays(batch)
        got_ids, got_logprobs = token_arrays(decode(data))
        np.testing.assert_array_equal(got_ids, ids)
        assert np.abs(got_logprobs.astype(np.float64) - logprobs).max() <= 1e-3


def test_three_byte_logprobs_round_trip_within_1e3(problems):
    # A log-prob below -128 needs q ≥ 2^16, so log-probs travel in 3 bytes too; the last one ends the
    # frame, the case where the 3-byte reader needs its padding byte.
    rng = np.random.default_rng(2)
    batch = make_batch(problems, np.arange(VOCAB_SIZE), rng, num_groups=2)
    last_group = batch.groups[-1]
    extreme = last_group.completions[-1].sampler_logprobs.copy()
    extreme[0], extreme[-1] = -200.0, -31_000.123
    last = replace(last_group.completions[-1], sampler_logprobs=extreme)
    last_group = last_group.replace(completions=(*last_group.completions[:-1], last))
    batch = replace(batch, groups=(*batch.groups[:-1], last_group))
    data = encode(batch)
    assert msgpack.unpackb(data)["body"]["tokens"]["logprob_width"] == 3
    ids, logprobs = token_arrays(batch)
    got_ids, got_logprobs = token_arrays(decode(data))
    np.testing.assert_array_equal(got_ids, ids)
    assert np.abs(got_logprobs.astype(np.float64) - logprobs).max() <= 1e-3
