"""The node fuzzer's quick run: a few hundred hostile batches through a real tiny node (decode, the door, scoring,
the mix, the training step), and the four properties: no exception out of ``run_round``, RSS growth under the bound
after warm-up, no forward pass past ``max_tokens_per_microbatch``, and an honest batch trained on in the round after
every hostile one.

Run: python -m pytest tests/test_fuzz_node.py -q      (the long run: python -m benchmarks.fuzz_node)

Seeded: the same cases on every run (``benchmarks/fuzzing/``: ``hostile.py`` and ``raw.py`` make them, ``run.py``
runs them, ``node.py`` is the node under fuzz).
"""

import random
from dataclasses import replace

from benchmarks.fuzzing.node import FuzzNode
from benchmarks.fuzzing.raw import MAKERS
from benchmarks.fuzzing.repro import load_cases, replay, save_cases
from benchmarks.fuzzing.reproducers import reproduce
from benchmarks.fuzzing.run import Settings, fuzz_nodes

# Two profiles (the async loop with shared prompts; rounds mode, horizontal grouping, trusted peer answers and the
# rows layout), every maker twice in each profile's first round, 3 hostile rounds each.
QUICK = Settings(cases=420, seed=0, cases_per_round=70, profiles=("async", "rounds"), weights=(1, 1),
                 warmup_rounds=1, rss_bound_mb=100.0, reduce=False)


def test_hostile_batches_neither_kill_bloat_nor_overrun_a_node_and_it_trains_on_after(tmp_path):
    tally = fuzz_nodes(replace(QUICK, out=tmp_path))
    assert tally.cases >= QUICK.cases and not tally.maker_errors, tally.maker_errors
    made = {maker for maker, _ in tally.outcomes}
    assert made == set(MAKERS), set(MAKERS) - made
    assert tally.count("escape") == 0, [(f.signature, f.error, "".join(f.frames)) for f in tally.findings
                                        if f.what == "escape"]
    assert tally.rss_baseline_mb > 0 and tally.rss_growth_mb < QUICK.rss_bound_mb, tally.rss_growth_mb
    assert tally.passes > 0 and tally.worst_pass <= tally.pass_bound, (tally.worst_pass, tally.pass_bound)
    assert tally.honest_rounds == tally.hostile_rounds and tally.honest_trained == tally.honest_rounds, \
        tally.honest_failures
    # The cases reached every stage: refused at the inbox, charged past it, and trained on.
    outcomes = {outcome for _, outcome in tally.outcomes}
    assert {"refused:decode_error", "trained"} <= outcomes and any("too_long" in o for o in outcomes), outcomes


def test_a_saved_case_replays_on_a_fresh_node(tmp_path):
    fuzz = FuzzNode("async")
    try:
        made = MAKERS["honest"][0](fuzz.kit(), random.Random(0), "mallory", 0)
    finally:
        fuzz.close()
    save_cases(tmp_path, [made])
    [loaded] = load_cases(tmp_path)
    assert loaded == made
    assert replay("async", [loaded]) == []


def test_a_number_longer_than_python_reads_in_a_peers_text_costs_its_group_not_the_round():
    # Another tokenizer's group whose texts answer with 5,000 digits: Fraction("9" * 5000) raises past Python's
    # 4,300-digit limit, and did so out of run_round.
    assert reproduce("huge-number-text") == []


def test_a_peers_long_prompt_is_never_one_forward_pass_past_the_bound():
    # A node that trusts its peers' gold answers trains on groups of problems it lacks, whose prompts only the protocol
    # bounds (32,768 tokens): a 1,025-token prompt must not make a pass past max_tokens_per_microbatch (1,024).
    assert reproduce("long-prompt-trusted") == []
