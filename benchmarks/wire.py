"""Bytes per token and encode/decode speed of protocol v1's token column on realistic rollouts.

Run (from the repo root):  python -m benchmarks.wire [--data PATH] [--tokenizer FOLDER] [--quick]
--data defaults to ../shared/data/gsm8k_test.jsonl (GSM8K test split, JSON lines with ``question``
and ``answer``); --tokenizer is the real Qwen2 tokenizer's folder (default: where ``bash .ci/tokenizers``
puts it; without it those rows are left out); --quick measures fewer batches with fewer repetitions and
runs in a few seconds.

Method:
1. GSM8K problems split by index parity: the even half trains a byte-level BPE tokenizer (the
   ``tokenizers`` library, asked for 16,384 tokens; the half is small, so it stops near 8k) and an
   add-k bigram model; the odd half makes the rollouts. Calculator annotations (``<<6*2=12>>``) are
   removed from solutions, as a model's output has none.
2. Batches of 32 groups of G = 8: a group's prompt is one problem's question; its completions are 8
   distinct worked solutions (the problem's own, then the next problems'), no solution twice in a
   batch. Real samples of one question share more text than this, so the sizes are conservative.
3. Two sampler log-prob streams, reported separately:
   - LLM-like: an assumed mixture for a ~1.5B instruct model sampling GSM8K at T = 1, where most
     tokens are near-certain: -logprob ~ Exp(mean 0.01) for 70% of tokens, Exp(0.7) for 25%,
     Exp(3) for 5% (mean 0.33 nats/token), drawn independently per token.
   - n-gram: the teacher-forced log-prob of each solution token under the add-k bigram model, so
     log-probs correlate with the tokens as real ones do; far higher entropy than an LLM's (about 6
     nats per token against 0.33).
4. Two id layouts, both declared inside Qwen2.5's 151,936-token vocabulary (so ids travel in 3
   bytes): the BPE tokenizer's own order (frequent merges get small ids, as in real vocabularies),
   and a worst case where a random permutation scatters the ids over the whole vocabulary.
5. The real Qwen2 tokenizer (Qwen2.5's, 151,936 tokens, docs/tokenizers.md) on what a node sends: a
   group's prompt is the task's GSM8K prompt in the chat template, as the node builds it
   (``tasks/prompts.py``); a completion is a worked solution in the paper's answer format (its
   reasoning in ``<think>``, its number in ``<answer>``, ``tags.tagged_completion``), then ``<|im_end|>``;
   the batch carries the tokenizer's own fingerprint and vocabulary size. The n-gram stream's bigram
   learns the same format on the other half. Goal for these rows: ≤ 3 B/token.
6. Sizes are per completion token and count everything the column carries, prompt ids included
   (once per group). Baselines carry the same content: the paper's plain uint32 ids + float32
   log-probs (8 B per completion token computed; measured as packed arrays, prompt ids included)
   and those arrays compressed by zstd at the same level. "msg" is the whole encoded message
   (msgpack envelope and metadata included). Errors compare decoded log-probs with the float32 ones
   that went in.
7. Speeds are one core, in MB/s of payload (the encoded message's bytes; Mtok/s counts completion
   tokens). ``decode`` is the fastest of many calls, as ``timeit`` advises (slower calls measure
   other load; this 2-core VM slows down by up to 2x for seconds at a time, so timing runs in rounds
   over all cases); "median" is shown beside it. "+objects" decodes and then builds every
   ``Completion`` object (decoding itself leaves a group's completions as columns); "zstd" inflates
   the token column alone, the floor for any decoder of this format, for scale. ``encode`` (which
   validates by decoding what it made) is the median.
8. Texts (protocol v3): every completion also carries its text (the solution as its tokenizer decodes it,
   special tokens left out), what a peer with another tokenizer needs. "texts" is what the text column adds
   to the whole message, per completion token: the message with texts minus the same message without; the
   other columns and the timings are of messages without texts, as before. "raw" is the texts' UTF-8 bytes
   before compression, for scale.
"""

import argparse
import dataclasses
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import numpy as np
import zstandard
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ftis.node.tasks.gsm8k import ANSWER_HINT
from ftis.node.tasks.tags import tag_prompt, tagged_completion
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
from ftis.protocol.columns import COMPRESSION_LEVEL, quantize_logprobs

# The trained BPE's batches: its ids declared inside Qwen2.5's vocabulary.
SYNTHETIC_TOKENIZER = TokenizerInfo("sha256:" + "5f" * 32, 151_936)

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k_test.jsonl"
QWEN_VOCAB_SIZE = 151_936
BPE_VOCAB_SIZE = 16_384
GROUP_SIZE = 8
GROUPS_PER_BATCH = 32
NGRAM_K = 0.01  # add-k smoothing: of 0.001 to 0.3, the value that fits the rollout half best
LLM_MIXTURE = ((0.70, 0.01), (0.25, 0.7), (0.05, 3.0))  # (share of tokens, mean of -logprob)

GOAL_BYTES_PER_TOKEN = 4.0
GOAL_REAL_BYTES_PER_TOKEN = 3.0  # the real Qwen2 tokenizer's rows
GOAL_MAX_ERROR = 1e-3
GOAL_DECODE_MB_S = 100.0
TIMING_ROUNDS = 3  # passes over all cases; each figure keeps its best pass


@dataclass(frozen=True)
class Problem:
    index: int  # row in the file
    question: str
    solution: str  # the worked solution, calculator annotations removed
    answer: str  # the number after "####"


def load_gsm8k(path: Path) -> list[Problem]:
    if not path.is_file():
        raise SystemExit(f"GSM8K not found at {path}: pass --data PATH (a JSON-lines file with question/answer)")
    problems = []
    for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        row = json.loads(line)
        solution = re.sub(r"<<[^>]*>>", "", row["answer"])
        problems.append(Problem(index, row["question"], solution, solution.rsplit("####", 1)[-1].strip()))
    return problems


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer, the kind Qwen and GPT use."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


class BigramModel:
    """Add-k smoothed bigram over token ids: log P(b | a) = log((c(a, b) + k) / (c(a) + k·V)); the
    first token of a sequence is conditioned on a start symbol (id V)."""

    def __init__(self, sequences: list[np.ndarray], vocab_size: int, k: float):
        self.vocab_size, self.k = vocab_size, k
        previous = np.concatenate([self._previous(s) for s in sequences])
        current = np.concatenate(sequences)
        self.pairs, self.pair_counts = np.unique(previous * (vocab_size + 1) + current, return_counts=True)
        self.context_counts = np.bincount(previous, minlength=vocab_size + 1)

    def _previous(self, ids: np.ndarray) -> np.ndarray:
        return np.concatenate([[self.vocab_size], ids[:-1]]).astype(np.int64)

    def logprobs(self, ids: np.ndarray) -> np.ndarray:
        previous = self._previous(ids)
        pairs = previous * (self.vocab_size + 1) + ids
        at = np.minimum(np.searchsorted(self.pairs, pairs), len(self.pairs) - 1)
        counts = np.where(self.pairs[at] == pairs, self.pair_counts[at], 0)
        probs = (counts + self.k) / (self.context_counts[previous] + self.k * self.vocab_size)
        return np.log(probs).astype(np.float32)


def llm_like_logprobs(rng: np.random.Generator, n: int) -> np.ndarray:
    shares, means = zip(*LLM_MIXTURE, strict=True)
    component = rng.choice(len(means), size=n, p=shares)
    return (-rng.exponential(np.asarray(means)[component])).astype(np.float32)


@dataclass(frozen=True)
class GroupPlan:
    """One group's content before ids are laid out and log-probs drawn."""

    problem: Problem
    prompt_ids: np.ndarray  # (p,) BPE ids
    solutions: list[int]  # G indices into the rollout half's solutions


def plan_batches(problems: list[Problem], prompts: list[np.ndarray], num_batches: int) -> list[list[GroupPlan]]:
    per_batch = GROUPS_PER_BATCH * GROUP_SIZE
    assert per_batch <= len(problems), "a batch would hold one solution twice"
    batches = []
    for b in range(num_batches):
        window = [(b * per_batch + j) % len(problems) for j in range(per_batch)]
        batches.append([
            GroupPlan(problems[window[g * GROUP_SIZE]], prompts[window[g * GROUP_SIZE]],
                      window[g * GROUP_SIZE : (g + 1) * GROUP_SIZE])
            for g in range(GROUPS_PER_BATCH)
        ])
    return batches


def build_batch(seq: int, plan: list[GroupPlan], solutions: list[np.ndarray], id_map: np.ndarray,
                logprobs: Callable[[int], np.ndarray], tokenizer: TokenizerInfo = SYNTHETIC_TOKENIZER,
                texts: list[str] | None = None) -> RolloutBatch:
    """A batch of ``plan``'s groups; with ``texts`` (one per solution), each completion carries its text."""
    groups = []
    for g, group in enumerate(plan):
        completions = tuple(
            Completion(id_map[solutions[s]], logprobs(s), reward=float(c % 3 == 0), finish_reason="stop",
                       text=texts[s] if texts is not None else None)
            for c, s in enumerate(group.solutions)
        )
        task = TaskRef("gsm8k", "test", group.problem.index, group.problem.answer)
        groups.append(Group(f"{seq:08x}-{g:04x}-{group.problem.index:08x}", task, id_map[group.prompt_ids],
                            completions))
    return RolloutBatch(
        run_id="gsm8k-wire-bench",
        peer_id="12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo",  # a libp2p peer id's length
        round=seq,
        created_at=1.7e9 + seq,
        policy=PolicyInfo("Qwen/Qwen2.5-1.5B-Instruct", "9" * 40, "lora", seq),  # revision: a commit hash
        tokenizer=tokenizer,
        sampling=SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1024),
        groups=tuple(groups),
    )


@dataclass
class CaseResult:
    ids: str
    stream: str
    completion_tokens: int = 0
    column_bytes: int = 0  # protocol v1's token column
    column_id_bytes: int = 0  # its ids and its log-probs compressed apart: where the bytes go
    column_lp_bytes: int = 0
    message_bytes: int = 0  # whole encoded messages, without texts
    text_bytes: int = 0  # what the text column adds to them (v3)
    text_raw_bytes: int = 0  # the texts' UTF-8 bytes
    plain_bytes: int = 0  # uint32 ids + float32 log-probs, packed
    plain_zstd_bytes: int = 0
    max_error: float = 0.0
    goal_bytes: float = GOAL_BYTES_PER_TOKEN  # per token, of the v1 column
    timings: dict[int, list["Timing"]] = field(default_factory=dict)  # batch seq -> one Timing per round

    def _total(self, name: str, best: bool = True) -> float:
        """Summed over the timed batches: each batch's best (or median) over the rounds."""
        pick = min if best else statistics.median
        return sum(pick(getattr(t, name) for t in rounds) for rounds in self.timings.values())

    def mb_s(self, name: str, best: bool = True) -> float:
        payload = sum(rounds[0].payload_bytes for rounds in self.timings.values())
        return payload / self._total(name, best) / 1e6

    def mtok_s(self, name: str) -> float:
        return sum(rounds[0].tokens for rounds in self.timings.values()) / self._total(name) / 1e6

    def per_token(self, num_bytes: int) -> float:
        return num_bytes / self.completion_tokens

    @property
    def texts_slowdown(self) -> float:
        """How much longer decoding takes when the batch carries texts (fastest calls)."""
        return self._total("texts") / self._total("decode") - 1

    @property
    def decode_mb_s(self) -> float:
        """Best of many calls, as ``timeit`` advises: slower calls measure other load on the machine."""
        return self.mb_s("decode")

    def failures(self) -> list[str]:
        checks = {
            "size": self.per_token(self.column_bytes) <= self.goal_bytes,
            "error": self.max_error <= GOAL_MAX_ERROR,
            "speed": self.decode_mb_s >= GOAL_DECODE_MB_S,
        }
        return [name for name, ok in checks.items() if not ok]


def call_seconds(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def packed(values: np.ndarray, width: int) -> bytes:
    """Values as the token column packs them: little-endian, ``width`` bytes each."""
    return np.ascontiguousarray(values.astype("<u4").view(np.uint8).reshape(-1, 4)[:, :width]).tobytes()


def token_arrays(batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
    """All ids (prompts, then completions) and all sampler log-probs of a batch."""
    completions = [c for group in batch.groups for c in group.completions]
    ids = np.concatenate([g.prompt_ids for g in batch.groups] + [c.token_ids for c in completions])
    return ids, np.concatenate([c.sampler_logprobs for c in completions])


def without_texts(batch: RolloutBatch) -> RolloutBatch:
    groups = tuple(Group.from_columns(g.group_id, g.task, g.prompt_ids, dataclasses.replace(g.columns, texts=None))
                   for g in batch.groups)
    return dataclasses.replace(batch, groups=groups)


def measure_sizes(result: CaseResult, batch: RolloutBatch) -> None:
    """The sizes of ``batch`` (which carries texts) and of the same batch without texts."""
    zstd = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL)
    texted = encode(batch)
    assert [c.text for g in decode(texted).groups for c in g.completions] == [
        c.text for g in batch.groups for c in g.completions], "texts changed in a round trip"
    result.text_raw_bytes += sum(len(t.encode()) for g in batch.groups for t in g.columns.texts or ())
    batch = without_texts(batch)
    data = encode(batch)
    result.text_bytes += len(texted) - len(data)
    ids, lps = token_arrays(batch)
    got_ids, got_lps = token_arrays(decode(data))
    assert np.array_equal(ids, got_ids), "ids changed in a round trip"
    tokens = msgpack.unpackb(data)["body"]["tokens"]
    q = quantize_logprobs("sampler_logprobs", lps)
    plain = ids.astype("<u4").tobytes() + lps.astype("<f4").tobytes()
    result.completion_tokens += batch.num_completion_tokens
    result.column_bytes += len(tokens["data"])
    result.column_id_bytes += len(zstd.compress(packed(ids, tokens["id_width"])))
    result.column_lp_bytes += len(zstd.compress(packed(q, tokens["logprob_width"])))
    result.message_bytes += len(data)
    result.plain_bytes += len(plain)
    result.plain_zstd_bytes += len(zstd.compress(plain))
    result.max_error = max(result.max_error, float(np.abs(got_lps.astype(np.float64) - lps).max()))


@dataclass
class Timing:
    """Seconds for one call on one batch without texts: encode (median), decode (median and best), decode
    that also builds every Completion object (best), and inflating the token column alone (best); and
    decoding the same batch with its texts (best)."""

    payload_bytes: int
    tokens: int
    encode: float
    decode_median: float
    decode: float
    objects: float
    zstd: float
    texts: float

    @classmethod
    def of(cls, texted: RolloutBatch, encode_repeats: int, decode_repeats: int) -> "Timing":
        batch = without_texts(texted)
        data, with_texts = encode(batch), encode(texted)
        column = msgpack.unpackb(data)["body"]["tokens"]["data"]
        inflater = zstandard.ZstdDecompressor()
        decode_times = call_seconds(lambda: decode(data), decode_repeats)
        return cls(
            payload_bytes=len(data),
            tokens=batch.num_completion_tokens,
            encode=statistics.median(call_seconds(lambda: encode(batch), encode_repeats)),
            decode_median=statistics.median(decode_times),
            decode=min(decode_times),
            objects=min(call_seconds(lambda: [g.completions for g in decode(data).groups], decode_repeats)),
            zstd=min(call_seconds(lambda: inflater.decompress(column), decode_repeats)),
            texts=min(call_seconds(lambda: decode(with_texts), decode_repeats)),
        )


def print_table(results: list[CaseResult]) -> None:
    rows = [(
        "ids", "log-probs", "v1 column (ids+lps)", "paper", "plain", "plain+zstd", "v1 msg", "texts (raw)",
        "max |err|", "encode", "decode", "decode", "median", "+objects", "zstd", "+texts", "goals",
    ), (
        "", "", "B/tok", "B/tok", "B/tok", "B/tok", "B/tok", "B/tok", "", "MB/s", "MB/s", "Mtok/s", "MB/s", "MB/s",
        "MB/s", "time", "",
    )]  # fmt: skip
    for r in results:
        b = r.per_token
        failures = r.failures()
        rows.append((
            r.ids, r.stream, f"{b(r.column_bytes):.2f} ({b(r.column_id_bytes):.2f}+{b(r.column_lp_bytes):.2f})",
            "8.00", f"{b(r.plain_bytes):.2f}", f"{b(r.plain_zstd_bytes):.2f}", f"{b(r.message_bytes):.2f}",
            f"+{b(r.text_bytes):.2f} ({b(r.text_raw_bytes):.2f})", f"{r.max_error:.2e}",
            f"{r.mb_s('encode', best=False):.1f}", f"{r.decode_mb_s:.1f}",
            f"{r.mtok_s('decode'):.1f}", f"{r.mb_s('decode_median', best=False):.1f}",
            f"{r.mb_s('objects'):.1f}", f"{r.mb_s('zstd'):.0f}", f"+{r.texts_slowdown:.0%}",
            "pass" if not failures else "FAIL " + ",".join(failures),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [cell.ljust(w) if i < 2 or i == len(row) - 1 else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True))]
        print(" | ".join(cells).rstrip())
        if n == 1:
            print("-+-".join("-" * w for w in widths))
    print("texts: what each completion's text (v3) adds to the whole message; raw: their UTF-8 bytes uncompressed; "
          "+texts time: decoding the message with texts against without (fastest calls)")
    print(f"goals: v1 column ≤ {GOAL_BYTES_PER_TOKEN} B/token (real Qwen2 tokenizer: ≤ {GOAL_REAL_BYTES_PER_TOKEN}), "
          f"max |err| ≤ {GOAL_MAX_ERROR}, "
          f"decode ≥ {GOAL_DECODE_MB_S:.0f} MB/s of payload on one core")
    print("decode: the fastest of many calls (timeit's advice; 'median' shows this machine's noise); "
          "+objects: decode and build every Completion object; zstd: inflating the token column alone, "
          "the floor any decoder of this format pays")


def real_qwen2_tokenizer(folder: Path | None):
    """The real Qwen2 tokenizer from ``folder`` or the cache ``.ci/tokenizers`` fills; None (said) when absent."""
    from transformers import AutoTokenizer

    from ftis.node.models.stand_in import real_tokenizer_folder

    try:
        folder = folder or real_tokenizer_folder("qwen2")
    except FileNotFoundError as missing:
        print(f"the real Qwen2 tokenizer's rows are left out: {missing}")
        return None
    return AutoTokenizer.from_pretrained(str(folder))


def answer_format(problem: Problem) -> str:
    """The worked solution as a model answering in the paper's format writes it: reasoning, then the number."""
    return tagged_completion(problem.solution.rsplit("####", 1)[0].strip(), problem.answer)


@dataclass
class RealRollouts:
    """The rollout half as the real Qwen2 tokenizer gives it to a node (module docstring, item 5)."""

    tokenizer: TokenizerInfo
    solutions: list[np.ndarray]  # the completions' ids, <|im_end|> last
    texts: list[str]  # the completions' ids decoded without special tokens
    ngram: list[np.ndarray]
    plans: list[list[GroupPlan]]


def real_rollouts(tokenizer, train: list[Problem], rollout: list[Problem], num_batches: int) -> RealRollouts:
    from ftis.node.models import tokenizer_fingerprint
    from ftis.node.tasks.prompts import prompt_ids

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def completions(problems: list[Problem]) -> list[np.ndarray]:
        encoded = tokenizer([answer_format(p) for p in problems], add_special_tokens=False)["input_ids"]
        return [np.array([*ids, end], np.int64) for ids in encoded]

    vocab = len(tokenizer)
    bigram = BigramModel(completions(train), vocab, NGRAM_K)
    solutions = completions(rollout)
    prompts = [prompt_ids(tokenizer, tag_prompt(p.question, ANSWER_HINT), chat=True) for p in rollout]
    texts = tokenizer.batch_decode(solutions, skip_special_tokens=True)
    return RealRollouts(TokenizerInfo(tokenizer_fingerprint(tokenizer), vocab), solutions, texts,
                        [bigram.logprobs(s) for s in solutions], plan_batches(rollout, prompts, num_batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="GSM8K as JSON lines (question, answer)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="the real Qwen2 tokenizer's folder (default: the .ci/tokenizers cache)")
    parser.add_argument("--quick", action="store_true", help="fewer batches and repetitions: a few seconds")
    args = parser.parse_args()
    num_batches, timed, encode_repeats, decode_repeats = (3, 1, 5, 20) if args.quick else (20, 4, 30, 150)
    rounds = 1 if args.quick else TIMING_ROUNDS

    problems = load_gsm8k(args.data)
    train, rollout = problems[0::2], problems[1::2]
    tokenizer = train_tokenizer([p.question for p in train] + [p.solution for p in train], BPE_VOCAB_SIZE)
    vocab = tokenizer.get_vocab_size()

    def tokenize(texts: list[str]) -> list[np.ndarray]:
        return [np.array(encoding.ids, np.int64) for encoding in tokenizer.encode_batch(texts)]

    bigram = BigramModel(tokenize([p.solution for p in train]), vocab, NGRAM_K)
    solutions = tokenize([p.solution for p in rollout])
    solution_texts = [p.solution for p in rollout]  # what the byte-level BPE decodes each solution's ids to
    ngram = [bigram.logprobs(s) for s in solutions]
    plans = plan_batches(rollout, tokenize([p.question for p in rollout]), num_batches)
    scattered = np.random.default_rng(0).permutation(QWEN_VOCAB_SIZE)[:vocab]
    layouts = {"BPE order": np.arange(vocab), "scattered": scattered}

    llm_sample, all_ngram = llm_like_logprobs(np.random.default_rng(0), 100_000), np.concatenate(ngram)
    print(f"GSM8K {args.data}: {len(train)} problems train the tokenizer and bigram, {len(rollout)} make rollouts")
    print(f"byte-level BPE: {vocab} tokens learned, ids declared in a {QWEN_VOCAB_SIZE}-token vocabulary")
    print(f"{num_batches} batches × {GROUPS_PER_BATCH} groups × G={GROUP_SIZE}; per completion "
          f"{np.mean([len(s) for s in solutions]):.0f} tokens, per prompt "
          f"{np.mean([len(p.prompt_ids) for plan in plans for p in plan]):.0f} (means)")
    print(f"-logprob: LLM-like mean {-llm_sample.mean():.2f}, {np.mean(llm_sample > -0.01):.0%} of tokens under 0.01; "
          f"n-gram (add-{NGRAM_K} bigram) mean {-all_ngram.mean():.2f}, {np.mean(all_ngram > -0.01):.0%} under 0.01")
    print(f"timing: {timed} batch(es) per case, {rounds} round(s) of {encode_repeats} encodes and "
          f"{decode_repeats} decodes each, one core\n")

    results, timed_batches = [], []
    for layout_name, id_map in layouts.items():
        llm_rng = np.random.default_rng(1)  # the same draws under both layouts
        streams: dict[str, Callable[[int], np.ndarray]] = {
            "LLM-like": lambda s, rng=llm_rng: llm_like_logprobs(rng, len(solutions[s])),
            "n-gram": lambda s: ngram[s],
        }
        for stream_name, stream in streams.items():
            result = CaseResult(layout_name, stream_name)
            for seq, plan in enumerate(plans):
                batch = build_batch(seq, plan, solutions, id_map, stream, texts=solution_texts)
                measure_sizes(result, batch)
                if seq < timed:
                    timed_batches.append((result, batch))
            results.append(result)
    qwen2 = real_qwen2_tokenizer(args.tokenizer)
    if qwen2 is not None:
        real = real_rollouts(qwen2, train, rollout, num_batches)
        print(f"real Qwen2 tokenizer ({real.tokenizer.vocab_size:,} tokens): per completion "
              f"{np.mean([len(s) for s in real.solutions]):.0f} tokens in the answer format, per prompt "
              f"{np.mean([len(p.prompt_ids) for plan in real.plans for p in plan]):.0f} in the chat template (means)")
        llm_rng = np.random.default_rng(1)
        streams = {"LLM-like": lambda s, rng=llm_rng: llm_like_logprobs(rng, len(real.solutions[s])),
                   "n-gram": lambda s: real.ngram[s]}
        for stream_name, stream in streams.items():
            result = CaseResult("Qwen2 tokenizer", stream_name, goal_bytes=GOAL_REAL_BYTES_PER_TOKEN)
            for seq, plan in enumerate(real.plans):
                batch = build_batch(seq, plan, real.solutions, np.arange(real.tokenizer.vocab_size), stream,
                                    real.tokenizer, real.texts)
                measure_sizes(result, batch)
                if seq < timed:
                    timed_batches.append((result, batch))
            results.append(result)
    # Timing in rounds over all cases, keeping each call's best: this machine slows down and speeds up
    # for seconds at a time, and rounds spread every case over those phases alike.
    for _ in range(rounds):
        timings = [Timing.of(batch, encode_repeats, decode_repeats) for _, batch in timed_batches]
        for (result, batch), timing in zip(timed_batches, timings, strict=True):
            result.timings.setdefault(batch.round, []).append(timing)
    print_table(results)


if __name__ == "__main__":
    main()
