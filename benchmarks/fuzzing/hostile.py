"""Hostile batches the protocol carries: each decodes, and each is built to reach one part of the node's intake
or step with what no honest peer sends.

Every maker is ``make(kit, rng, peer_id, round_) -> Case`` (``kit.py``: what the peer knows of the node); its
variant is drawn from ``rng`` and named in ``Case.kind``. ``raw.py`` holds the batches the protocol refuses;
``MAKERS`` (``raw.py``) lists both with their weights.

- ``honest``: the node's problems and prompts, tagged answers, rewards that vary (what the fuzzer's honest peer
  sends too): the baseline every other maker departs from;
- ``huge_number_text`` / ``huge_number_gold``: numbers of more than 4,300 digits (Python's limit on ``int`` of a
  string: ``Fraction`` raises) in another tokenizer's texts, and in the gold-answer field of a problem the node
  lacks (read where ``task.trust_peer_answers`` is set);
- ``long_completions``: up to the protocol's 32,768 tokens a completion, 128 × 8,192 in one group, a group as wide
  as the protocol allows of completions as long as the node samples;
- ``long_prompt``: prompts of 1,025 and 4,096 tokens, and (1 time in 10) of 32,768, or of 1, on the node's
  problems, on a problem it lacks, in another tokenizer;
- ``odd_texts``: another tokenizer's texts of bidi and control characters, NULs, combining-character storms,
  special tokens' strings, the answer tags repeated;
- ``vocab_edge``: ids at the edge of the node's vocabulary and embedding, claimed vocabularies up to 2**24;
- ``sampling_edges``: temperatures and top-p/top-k at the protocol's bounds, log-probs at 0 and at the lowest;
- ``small_groups``: groups of one completion, of one token, all-equal rewards, thousands of groups;
- ``wrong_refs``: the node's problems behind another problem's prompt, in other splits, at odd indices;
- ``other_tokenizer``: another tokenizer's groups with and without texts, at the text bound and past it;
- ``rounds_ahead`` / ``dated``: rounds far ahead or behind (rounds mode holds later ones), dates at the edges, the
  largest policy version;
- ``horizontal_ids``: the round's shared group ids, with the wrong prompt or a group of 512;
- ``math_answers``: MATH-style LaTeX answers (nested braces, towers of powers), for a MATH-500 node.
"""

import random
import time
from collections.abc import Callable

import numpy as np

from benchmarks.fuzzing.kit import (
    OTHER_FINGERPRINT,
    Kit,
    batch,
    case,
    group_id,
    own_group,
    sized,
    tagged,
    text_group,
    varied,
)
from benchmarks.fuzzing.peers import Case
from ftis.protocol import RolloutBatch, TaskRef
from ftis.protocol.limits import (
    MAX_ANSWER_CHARS,
    MAX_COMPLETION_TOKENS,
    MAX_GROUP_SIZE,
    MAX_PROMPT_TOKENS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_LOGPROB,
    MIN_TEMPERATURE,
)

Maker = Callable[[Kit, random.Random, str, int], Case]
PYTHON_INT_DIGITS = 4300  # sys.get_int_max_str_digits(): a longer string of digits is no int


def honest_batch(kit: Kit, rng: random.Random, peer: str, round_: int) -> RolloutBatch:
    """What an honest peer of this node sends: its problems with its prompts (under horizontal grouping, the
    round's shared ones and their ids), completions no longer than it samples, rewards that vary."""
    if kit.horizontal:
        chosen = kit.shared(round_)
    else:
        chosen = [(group_id(peer, round_, k), kit.problem(rng)) for k in range(rng.randint(1, 3))]
    groups = [own_group(kit, group_id, problem, [kit.ids(t) for t in varied(problem, rng.choice([2, 4, 8]))])
              for group_id, problem in chosen]
    return batch(kit, peer, round_, groups)


def honest(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    return case("honest", honest_batch(kit, rng, peer, round_))


def _huge_numbers(rng: random.Random, room: int) -> tuple[str, str]:
    """A number of more than Python's int digits, in one of the forms ``numeric.py`` reads, within ``room``
    characters."""
    digits = min(room - 8, rng.choice([PYTHON_INT_DIGITS + 1, 5000, room]))
    forms = {
        "digits": lambda: "9" * digits,
        "negative": lambda: "-" + "7" * digits,
        "unicode_minus": lambda: "\u2212" + "7" * digits,
        "commas": lambda: "1" + ",000" * (digits // 4),
        "decimal": lambda: "0." + "3" * digits,
        "leading_zeros": lambda: "0" * digits + "5",
    }
    form = rng.choice(sorted(forms))
    return form, forms[form]()


def huge_number_text(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    form, number = _huge_numbers(rng, kit.max_text_characters - 40)
    texts = [tagged(number) if c % 2 else tagged(problem.answer) for c in range(rng.choice([2, 4, 8]))]
    group = text_group(group_id(peer, round_, 0), problem, texts)
    return case(f"huge_number_text/{form}", batch(kit, peer, round_, [group], fingerprint=OTHER_FINGERPRINT))


def huge_number_gold(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """A gold answer of up to 4,096 characters (the protocol's bound) on a problem the node lacks, or on its own
    (the node's copy wins), against completions in its tokens holding the longest numbers it samples."""
    problem = kit.problem(rng)
    form, gold = _huge_numbers(rng, MAX_ANSWER_CHARS)
    if rng.random() < 0.3:  # a MATH-style gold: what a MATH-500 node's math_verify parses
        form = rng.choice(sorted(LATEX))
        gold = (LATEX[form] * (MAX_ANSWER_CHARS // len(LATEX[form])))[:MAX_ANSWER_CHARS]
    dataset = rng.choice(["gsm8k", "foreign/problems", problem.dataset])
    ref = TaskRef(dataset, kit.split, rng.randrange(2**31), gold[:MAX_ANSWER_CHARS])
    longest = "9" * max(1, kit.max_new_tokens - len(kit.ids(tagged(""))))
    rows = [kit.ids(tagged(longest if c % 2 else "3"))[: kit.max_new_tokens] for c in range(4)]
    group = own_group(kit, group_id(peer, round_, 0), problem, rows, ref=ref)
    return case(f"huge_number_gold/{form}/{dataset.split('/')[0]}", batch(kit, peer, round_, [group]))


def long_completions(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    n = kit.max_new_tokens
    heavy = [(128, 8192), (1, MAX_COMPLETION_TOKENS)]  # a million tokens to build and read: drawn 1 time in 10
    count, length = rng.choice(heavy if rng.random() < 0.1 else
                               [(16, 1024), (8, n + 1), (4, n), (MAX_GROUP_SIZE, n), (2 * kit.group_size, n)])
    problem = kit.problem(rng)
    rows = [sized(kit, text, length) for text in varied(problem, count)]
    group = own_group(kit, group_id(peer, round_, 0), problem, rows)
    return case(f"long_completions/{count}x{length}", batch(kit, peer, round_, [group]))


def long_prompt(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    length = MAX_PROMPT_TOKENS if rng.random() < 0.1 else rng.choice([4096, 1025, 1])  # the longest is costly
    own = kit.prompter.ids(problem)
    prompt = np.resize(own, length)
    where = rng.choice(["own_problem", "foreign_problem", "other_tokenizer"])
    rows = [kit.ids(t) for t in varied(problem, 4)]
    if where == "other_tokenizer":
        group = text_group(group_id(peer, round_, 0), problem, varied(problem, 4)).replace(prompt_ids=prompt % 1000)
        return case(f"long_prompt/{length}/{where}", batch(kit, peer, round_, [group], fingerprint=OTHER_FINGERPRINT))
    ref = None if where == "own_problem" else TaskRef("foreign/problems", kit.split, 7, problem.answer)
    group = own_group(kit, group_id(peer, round_, 0), problem, rows, prompt=prompt, ref=ref)
    return case(f"long_prompt/{length}/{where}", batch(kit, peer, round_, [group]))


ODD_PIECES = {
    "bidi": "\u202e\u2066\u2069\u200f\u061c",
    "control": "".join(map(chr, range(1, 32))) + "\x7f\x85\u2028\u2029",
    "nul": "\x00",
    "combining": "\u0301\u0308\u0327\u20dd",
    "zero_width": "\u200b\u200c\u200d\ufeff",
    "astral": "\U0010ffff\U0001f608\U000e0001",
    "noncharacters": "\ufffe\uffff\ufdd0",
    "specials": "<eos><bos><pad><unk><|endoftext|><|im_end|>",
    "tags": "<think></think><answer></answer>",
    "newlines": "\r\n\r\n\n\n",
}


def odd_texts(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    piece = rng.choice(sorted(ODD_PIECES))
    room = kit.max_text_characters - 60
    size = rng.choice([1, 16, 256, room])
    junk = "".join(rng.choice(ODD_PIECES[piece]) for _ in range(size))
    if piece == "combining":  # a storm: every mark on one base character
        junk = "a" + junk
    where = rng.choice(["think", "answer", "whole", "around"])
    texts = []
    for c in range(rng.choice([2, 4, 8])):
        answer = problem.answer if c % 2 else "0"
        texts.append({"think": tagged(answer, think=junk), "answer": tagged(answer + junk),
                      "whole": junk[:room], "around": junk[: room // 2] + tagged(answer) + junk[: room // 2]}[where])
    group = text_group(group_id(peer, round_, 0), problem, texts, finish=rng.choice(["stop", "length"]))
    return case(f"odd_texts/{piece}/{where}", batch(kit, peer, round_, [group], fingerprint=OTHER_FINGERPRINT))


def vocab_edge(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """Ids at the edge: the last of the tokenizer, the last embedding row, the first past it; the vocabulary
    claimed as the node's, one more, or the protocol's largest."""
    claimed = rng.choice([kit.vocab_size, kit.embedding_rows, kit.embedding_rows + 1, 1 << 16, MAX_VOCAB_SIZE])
    edge = rng.choice(sorted({kit.vocab_size - 1, kit.embedding_rows - 1, kit.embedding_rows, claimed - 1}))
    edge = min(edge, claimed - 1)
    problem = kit.problem(rng)
    rows = [kit.ids(t) for t in varied(problem, 4)]
    where = rng.choice(["completion", "prompt", "every_token"])
    if where == "completion":
        rows = [np.concatenate([row, [edge]]) for row in rows]
    elif where == "every_token":
        rows = [np.full(len(row), edge) for row in rows]
    prompt = np.concatenate([kit.prompter.ids(problem), [edge]]) if where == "prompt" else None
    group = own_group(kit, group_id(peer, round_, 0), problem, rows, prompt=prompt)
    return case(f"vocab_edge/{where}/{'past' if edge >= kit.embedding_rows else 'within'}",
                batch(kit, peer, round_, [group], vocab_size=claimed))


def sampling_edges(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    temperature = rng.choice([MIN_TEMPERATURE, MAX_TEMPERATURE, 1.0])
    top_p, top_k = rng.choice([(1.0, 0), (1e-9, 0), (1.0, 1), (1e-9, MAX_VOCAB_SIZE)])
    logprobs = rng.choice(["zero", "lowest", "alternating"])
    problem = kit.problem(rng)
    rows = [kit.ids(t) for t in varied(problem, 4)]
    value = {"zero": 0.0, "lowest": MIN_LOGPROB,
             "alternating": lambda n: np.where(np.arange(n) % 2, 0.0, MIN_LOGPROB)}[logprobs]
    groups = [own_group(kit, group_id(peer, round_, k), problem, [rows[k], rows[k + 2]], logprob=value) for k in (0, 1)]
    made = batch(kit, peer, round_, groups, temperature=temperature, top_p=top_p, top_k=top_k,
                 max_new_tokens=rng.choice([None, MAX_COMPLETION_TOKENS]))
    return case(f"sampling_edges/T{temperature:g}/logprobs_{logprobs}", made)


def small_groups(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    variant = rng.choice(["one_completion", "all_equal", "one_token", "many_groups"])
    groups = []
    count = (4096 if rng.random() < 0.1 else 512) if variant == "many_groups" else rng.randint(1, 4)
    one = kit.problem(rng)
    prompt = kit.prompter.ids(one)  # many groups of one problem: its prompt rendered once
    for k in range(count):
        problem = one if variant == "many_groups" else kit.problem(rng)
        if variant == "one_completion":
            rows = [kit.ids(tagged(problem.answer))]
        elif variant == "all_equal":
            rows = [kit.ids(tagged(problem.answer))] * kit.group_size
        else:
            rows = [kit.ids(rng.choice(["1", "x", "<answer>"]))[:1] for _ in range(2)]
        groups.append(own_group(kit, group_id(peer, round_, k), problem, rows,
                                prompt=prompt if problem is one else None))
    return case(f"small_groups/{variant}", batch(kit, peer, round_, groups))


def wrong_refs(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem, other = kit.problem(rng), kit.problem(rng)
    variant = rng.choice(["other_prompt", "split", "index", "dataset"])
    ref = TaskRef(problem.dataset, problem.split, problem.index, problem.answer)
    prompt = None
    if variant == "other_prompt":
        prompt = kit.prompter.ids(other)
    elif variant == "split":
        ref = TaskRef(problem.dataset, rng.choice(["test", "dev", "ood", "", "nope", "train\x00", "TRAIN", "é" * 256]),
                      problem.index, problem.answer)
    elif variant == "index":
        ref = TaskRef(problem.dataset, problem.split, rng.choice([0, 2**31 - 1, 2**31, 2**62, 2**63 - 1]),
                      problem.answer)
    else:
        ref = TaskRef(rng.choice(["x", problem.dataset + "x", problem.dataset.upper(), "gsm8k", "math500"]),
                      problem.split, problem.index, problem.answer)
    group = own_group(kit, group_id(peer, round_, 0), problem, [kit.ids(t) for t in varied(problem, 4)], prompt=prompt,
                      ref=ref)
    return case(f"wrong_refs/{variant}", batch(kit, peer, round_, [group]))


def other_tokenizer(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    variant = rng.choice(["texts", "no_texts", "at_text_bound", "past_retokenized_bound", "huge_vocab"])
    texts = varied(problem, rng.choice([2, 4, 8]))
    if variant == "at_text_bound":
        texts = [t + " " * (kit.max_text_characters - len(t)) for t in texts]
    elif variant == "past_retokenized_bound":
        texts = [tagged(problem.answer if c % 2 else "0", think="1 " * (kit.max_new_tokens * 3))
                 for c in range(len(texts))]
    group = text_group(group_id(peer, round_, 0), problem, texts, finish=rng.choice(["stop", "length"]),
                       id_of=MAX_VOCAB_SIZE - 1 if variant == "huge_vocab" else 7)
    if variant == "no_texts":
        group = group.replace(completions=tuple(c.__class__(c.token_ids, c.sampler_logprobs, c.reward,
                                                            c.finish_reason) for c in group.completions))
    made = batch(kit, peer, round_, [group], fingerprint=f"{OTHER_FINGERPRINT}-{rng.randrange(3)}",
                 vocab_size=MAX_VOCAB_SIZE if variant == "huge_vocab" else None)
    return case(f"other_tokenizer/{variant}", made)


def rounds_ahead(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """A batch of a round far ahead of the node's, or behind it (rounds mode holds a later round's batch)."""
    ahead = rng.choice([1, 2, 1000, 10**9, MAX_ROUND // 2, MAX_ROUND // 2 + 1, MAX_ROUND - 16])
    claimed = max(round_, min(kit.round + ahead, MAX_ROUND))
    made = honest(kit, rng, peer, claimed)
    return Case(f"rounds_ahead/{ahead}", made.peer_id, claimed, made.payload, made.tokenizer, made.created_at)


def dated(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """Creation dates at the edges of what the inbox takes (just ahead of its clock, just past it, far behind), and
    the largest policy version."""
    offset = rng.choice([59.0, 61.0, -119.0, -10**6, 10**9])
    version = rng.choice([0, 2**63 - 1])
    problem = kit.problem(rng)
    group = own_group(kit, group_id(peer, round_, 0), problem, [kit.ids(t) for t in varied(problem, 4)])
    made = batch(kit, peer, round_, [group], created_at=max(0.0, time.time() + offset), policy_version=version)
    return case(f"dated/{offset:+g}/version_{version}", made)


def horizontal_ids(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """Groups under the round's shared ids (horizontal grouping merges them with the node's own): the right prompt
    with a group of 512, another problem's prompt, or the shared problem of another position."""
    shared = kit.shared(kit.round)
    variant = rng.choice(["wide", "other_prompt", "swapped"])
    group_id, problem = rng.choice(shared)
    other = kit.problem(rng)
    count = MAX_GROUP_SIZE if variant == "wide" else 4
    rows = [kit.ids(t) for t in varied(problem, count)]
    prompt = {"wide": None, "other_prompt": kit.prompter.ids(other),
              "swapped": kit.prompter.ids(shared[-1][1])}[variant]
    group = own_group(kit, group_id, problem, rows, prompt=prompt)
    return case(f"horizontal_ids/{variant}", batch(kit, peer, round_, [group]))


LATEX = {
    "fraction": "\\frac{1}{2}",
    "nested_braces": "{" * 200 + "1" + "}" * 200,
    "tower": "10^{10^{10^{10^{10}}}}",
    "sqrt_chain": "\\sqrt{" * 60 + "2" + "}" * 60,
    "matrix": "\\begin{pmatrix}" + "&".join("1" * 9 for _ in range(30)) + "\\end{pmatrix}",
    "huge_integer": "9" * 500,
    "unbalanced": "\\frac{1}{" * 40,
    "boxed": "\\boxed{\\boxed{\\boxed{x^2+1}}}",
    "factorial": "1000000!",
}


def math_answers(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    name = rng.choice(sorted(LATEX))
    texts = [tagged(LATEX[name] if c % 2 else problem.answer) for c in range(4)]
    if rng.random() < 0.5:
        group = text_group(group_id(peer, round_, 0), problem, texts)
        return case(f"math_answers/{name}/texts", batch(kit, peer, round_, [group], fingerprint=OTHER_FINGERPRINT))
    rows = [kit.ids(t)[: kit.max_new_tokens] for t in texts]
    return case(f"math_answers/{name}/ids", batch(kit, peer, round_, [own_group(kit, group_id(peer, round_, 0), problem,
                                                                                   rows)]))
