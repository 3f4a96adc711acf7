"""The node fuzzer's findings, each as a named reproducer: one case of a maker's variant on a fresh node.

    python -m benchmarks.fuzz_node --reproduce long-prompt-trusted     # prints what the node did with it

Each entry names the profile (``node.py``) and the case's kind (``hostile.py``, ``raw.py``: ``maker/variant``); the
case is the first the maker draws with that kind from seeds 0, 1, 2... (``case_of``), so it is the same on every
run, and ``replay`` runs it as the fuzzer does (a hostile round, then the honest round). A reproducer that finds
nothing is a finding fixed.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.fuzzing.hostile import LATEX
from benchmarks.fuzzing.kit import Kit, batch, case, group_id, own_group, tagged
from benchmarks.fuzzing.node import Finding, FuzzNode
from benchmarks.fuzzing.peers import Case
from benchmarks.fuzzing.raw import MAKERS
from benchmarks.fuzzing.repro import replay

MAX_SEEDS = 10_000


@dataclass(frozen=True)
class Reproducer:
    profile: str
    kind: str  # a case kind, or its start
    what: str  # what the node did with it where it was found
    build: Callable[[Kit], Case] | None = None  # the case, where a maker's draw is not precise enough


def tower_against_a_symbolic_gold(kit: Kit) -> Case:
    """``math_answers/tower`` on the MATH-500 problem whose gold holds a variable ("x^2+2x+1"): math_verify's
    numeric comparison evaluates the tower (sympy's evalf, mpmath's power), which its signal-based timeout cannot
    interrupt."""
    index = next(i for i in range(kit.task.size(kit.split)) if "x" in kit.task.problem(kit.split, i).answer)
    problem = kit.task.problem(kit.split, index)
    rows = [kit.ids(tagged(LATEX["tower"] if c % 2 else problem.answer)) for c in range(4)]
    return case("math_answers/tower/ids", batch(kit, "mallory", 0, [own_group(kit, group_id("mallory", 0, 0), problem,
                                                                             rows)]))


REPRODUCERS = {
    "long-prompt-trusted": Reproducer(
        "rounds", "long_prompt/1025/foreign_problem",
        "task.trust_peer_answers: a group on a problem the node lacks, its prompt 1,025 tokens, is trained on in one "
        "pass of 1,036-1,038 tokens (rows layout), past max_tokens_per_microbatch (1,024): the door bounds a "
        "completion's length, not a prompt's"),
    "long-prompt-trusted-32768": Reproducer(
        "rounds", "long_prompt/32768/foreign_problem",
        "the same at the protocol's longest prompt: one pass of 32,780 tokens, a round of 108-244 s, a peak RSS of "
        "9.1 GB (rows layout, gradient checkpointing)"),
    "long-prompt-shared": Reproducer(
        "math500", "long_prompt/4096/foreign_problem",
        "the same with shared prompts (a MATH-500 node trusting peer answers): one pass of 4,106-4,108 tokens"),
    "math-tower": Reproducer(
        "math500", "math_answers/tower/ids",
        "MATH-500: two completions answering 10^{10^{10^{10^{10}}}} against the gold x^2+2x+1 raise the node's peak "
        "RSS by 4.2 GB (one comparison, math500.equivalent, alone: 10 s and 4,309 MB); in a loaded fuzz round, 56 s "
        "of scoring (mix.max_scoring_s is 10: its deadline is checked between groups)", tower_against_a_symbolic_gold),
    "huge-number-text": Reproducer(
        "async", "huge_number_text/digits",
        "another tokenizer's text answering with 5,000 digits: unless tasks/numeric.py bounds the digits, Python's "
        "4,300-digit limit raises ValueError in the_number, out of run_round"),
}


def case_of(kind: str, kit: Kit, peer_id: str = "mallory", round_: int = 0) -> Case:
    """The first case of ``kind`` (or a kind starting with it) its maker draws, seeds 0, 1, 2..."""
    make = MAKERS[kind.split("/")[0]][0]
    for seed in range(MAX_SEEDS):
        case = make(kit, random.Random(seed), peer_id, round_)
        if case.kind.startswith(kind):
            return case
    raise ValueError(f"{kind!r}: not drawn in {MAX_SEEDS} seeds")


def reproduce(name: str) -> list[Finding]:
    """What a fresh node of the reproducer's profile finds with its case."""
    reproducer = REPRODUCERS[name]
    fuzz = FuzzNode(reproducer.profile)
    try:
        kit = fuzz.kit()
        case = reproducer.build(kit) if reproducer.build is not None else case_of(reproducer.kind, kit)
    finally:
        fuzz.close()
    return replay(reproducer.profile, [case])
