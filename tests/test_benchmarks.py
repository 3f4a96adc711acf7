"""The CPU benchmarks of the node (``benchmarks/trainer.py``, ``benchmarks/generation.py``) and the relayed-fetch
benchmark (``benchmarks/relay_fetch.py``, where network namespaces can be built: about 30-60 s) run end to end in
their ``--quick`` form and print figures that parse, so they cannot rot between the runs that measure the figures
of docs/benchmarks.md; their pure helpers are checked on hand-built inputs. Nothing here times anything.

Run: python -m pytest tests/test_benchmarks.py -q
"""

import importlib
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from helpers.netns import require_netns

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def benchmarks(monkeypatch):
    """``import_module`` for ``benchmarks.*`` (a folder at the repository root, not an installed package)."""
    monkeypatch.syspath_prepend(str(REPO))
    return lambda name: importlib.import_module(f"benchmarks.{name}")


def table_rows(printed: str, first_cell: str) -> list[list[str]]:
    """The cells of the printed table rows whose first cell is ``first_cell``."""
    rows = [[cell.strip() for cell in line.split("|")] for line in printed.splitlines() if "|" in line]
    return [row for row in rows if row[0] == first_cell]


def test_trainer_benchmark_quick_prints_a_ratio_per_model_and_checks_identical_work(benchmarks, capsys):
    benchmarks("trainer").main(["--quick"])
    printed = capsys.readouterr().out
    (row,) = table_rows(printed, "tiny-small full")
    step_ftis, step_nois, ratio = row[3], row[4], float(row[5])
    assert step_ftis.endswith(" ms") and step_nois.endswith(" ms"), printed
    assert 0.2 < ratio < 5, printed  # a ratio of two medians of the same work, give or take the machine's noise
    assert row[-1] == "yes", printed  # weights and AdamW state restored: every repetition did the same step
    summary = re.search(r"tiny-small full: ftis step ([\d.]+)× nois \(median; goal ≤ 1.05×: (met|MISSED by [\d.]+%)\), "
                        r"fastest ([\d.]+)×; the part that differs \(loss \+ its backward\) adds ([-+][\d.]+) ms",
                        printed)
    assert summary and float(summary.group(1)) == ratio and float(summary.group(3)) == float(row[7]), printed


def test_generation_benchmark_quick_prints_backend_and_raw_speeds(benchmarks, capsys):
    benchmarks("generation").main(["--quick"])
    printed = capsys.readouterr().out
    (row,) = table_rows(printed, "tiny-small full")
    threads, max_new, sequences = int(row[1]), int(row[2]), int(row[3])
    backend, backend_tokens = float(row[4].replace(",", "")), int(row[5])
    raw, raw_tokens = float(row[6].replace(",", "")), int(row[7])
    assert (threads, max_new, sequences) == (1, 6, 2 * 8), printed  # 2 prompts × the demo's G = 8
    assert 0 < backend_tokens <= sequences * max_new and 0 < raw_tokens <= sequences * max_new, printed
    assert backend > 0 and raw > 0 and float(row[8]) == pytest.approx(backend / raw, rel=0.02), printed


def test_kept_tokens_count_through_the_first_end_of_sequence(benchmarks):
    kept_tokens = benchmarks("generation").kept_tokens
    eos = 2
    generated = np.array([
        [5, 6, 7, 8],  # no end of sequence: all 4
        [5, 2, 0, 0],  # stops at the second token, padding after it: 2
        [2, 2, 0, 0],  # an end of sequence first: 1
    ])  # fmt: skip
    assert kept_tokens(generated, eos) == 4 + 2 + 1


def test_benchmark_rewards_make_every_group_informative(benchmarks):
    informative_rewards = benchmarks("trainer").informative_rewards
    rng = np.random.default_rng(0)
    for size in (2, 3, 8):
        for _ in range(50):
            rewards = informative_rewards(rng, size)
            assert rewards.shape == (size,) and set(rewards.tolist()) == {0.0, 1.0}


def test_learning_benchmark_sums_seeds_up_as_mean_and_standard_error(benchmarks):
    learning = benchmarks("learning")
    assert learning.mean_se([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0 / 3**0.5))
    assert learning.mean_se([0.4]) == (0.4, 0.0)

    def run(seed, start, end):
        evaluations = [{"round": 0, "accuracy": start, "standard_error": 0.02, "carry": start - 0.1,
                        "no-carry": start + 0.1}, {"round": 20, "accuracy": end, "standard_error": 0.02,
                                                   "carry": end - 0.1, "no-carry": end + 0.1}]
        return {"node": "small", "seed": seed, "evaluations": evaluations, "own_reward": [0.2] * 10 + [0.3] * 10}

    lines: list[str] = []
    figures = learning.summarize([run(0, 0.30, 0.45), run(1, 0.32, 0.40)], echo=lines.append)
    assert figures["small"]["gain"] == pytest.approx(0.115)
    printed = "\n".join(lines)
    assert "gain  11.5 ± 3.5  (per seed: +15.0, +8.0)" in printed
    assert "sampling accuracy per 10 rounds: 20 30" in printed
    assert "not judged on 20 rounds" in printed  # the goal is for 150 rounds
    long = [run(0, 0.30, 0.45), run(1, 0.32, 0.40)]
    for record in long:
        record["evaluations"][-1]["round"] = 150
    lines.clear()
    learning.summarize(long, echo=lines.append)
    assert "goal ≥ 10 points within 150 rounds: met (+11.5)" in "\n".join(lines)
    assert learning.node_config("medium", 2, (("trainer.learning_rate", 3e-4),)).trainer.learning_rate == 3e-4
    assert learning.node_config("medium", 2).loop.mode == "async"  # alone: it waits for no peer
    lines.clear()
    learning.summarize(long, echo=lines.append, goal_rounds=30)  # --real: the goal is for 30 rounds
    assert "goal ≥ 10 points within 30 rounds: met (+11.5)" in "\n".join(lines)
    real = learning.node_config(learning.REAL_NODE, 1, (), str(learning.REAL_DEMO))  # --real's node
    assert (real.model.name, real.model.seed, real.loop.mode) == ("smollm2-135m-instruct", 1, "async")
    assert real.task.few_shot > 0 and real.generation.stop


def test_real_demo_benchmark_reads_each_seeds_summary_and_says_which_goals_each_node_missed(benchmarks, tmp_path,
                                                                                            capsys):
    real_demo = benchmarks("real_demo")
    settings = real_demo.seed_settings(real_demo.DEFAULT_CONFIG, 2, 5, tmp_path / "seed-2.toml")
    from ftis.node.demo.settings import load_demo_config

    demo = load_demo_config(settings)
    assert demo.demo.rounds == 5 and {config.model.seed for config in demo.node_configs().values()} == {2}
    assert len(demo.node_configs()) >= 3  # the real demo: three real nodes

    def node(name, start, end, solo):  # a node's row of the demo's summary.json
        return {"name": name, "model": "smollm2-135m-instruct", "adapter": "full", "change": end - start,
                "start_accuracy": start, "start_error": 0.01, "end_accuracy": end, "end_error": 0.03,
                "solo_end_accuracy": solo, "solo_end_error": 0.04, "ahead_of_solo": end - solo,
                "ahead_of_solo_errors": (end - solo) / 0.05}

    for seed, rows, seconds in ((0, [node("a", 0.03, 0.47, 0.35), node("b", 0.11, 0.17, 0.15)], 840.0),
                                (1, [node("a", 0.03, 0.45, 0.44), node("b", 0.11, 0.25, 0.10)], 1000.0)):
        folder = tmp_path / "runs" / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps({"solo_ran": True, "nodes": rows}))
        (folder / real_demo.WALL).write_text(json.dumps({"seconds": seconds}))
    real_demo.main(["--seeds", "0", "1", "--out", str(tmp_path / "runs")])  # read, not run again
    printed = capsys.readouterr().out
    model = "smollm2-135m-instruct (full)"
    assert f"| 0 | a ({model}) | 3.0% ± 1.0 | 47.0% ± 3.0 | 35.0% ± 4.0 | +44.0 | +12.0 (2.4 SE) |" in printed
    assert f"| 0 | b ({model}) | 11.0% ± 1.0 | 17.0% ± 3.0 | 15.0% ± 4.0 | +6.0 ✗ | +2.0 (0.4 SE) ✗" in printed
    assert "16.7 min (over 15)" in printed
    assert "a: gain +43.0 ± 1.0 points, end − solo +6.5 ± 5.5 points; goals met on 2/2 seeds (gain), 1/2 (lead)" \
        in printed
    assert "wall time 14.0–16.7 min (goal ≤ 15): 1/2 seeds within it" in printed

    nois = load_demo_config(real_demo.seed_settings(real_demo.DEFAULT_CONFIG, 0, None, tmp_path / "n.toml",
                                                    real_demo.NOIS))
    assert not nois.demo.solo and {c.loss.variant for c in nois.node_configs().values()} == {"nois"}
    for seed, ends in ((0, (0.40, 0.20)), (1, (0.46, 0.20))):  # b is the weakest (lowest end with F-TIS)
        folder = tmp_path / "runs" / f"seed-{seed}-nois"
        folder.mkdir(parents=True)
        rows = [{"name": name, "end_accuracy": end, "end_error": 0.03} for name, end in zip("ab", ends, strict=True)]
        (folder / "summary.json").write_text(json.dumps({"solo_ran": False, "nodes": rows}))
    real_demo.main(["--seeds", "0", "1", "--out", str(tmp_path / "runs"), "--nois"])
    printed = capsys.readouterr().out
    assert "| 0 | a | 47.0% ± 3.0 | 40.0% ± 3.0 | +7.0 (1.6 SE) |" in printed
    assert "| 0 | b (weakest: ✗) | 17.0% ± 3.0 | 20.0% ± 3.0 | -3.0 (-0.7 SE) |" in printed
    assert "| 1 | b (weakest) | 25.0% ± 3.0 | 20.0% ± 3.0 | +5.0 (1.2 SE) |" in printed
    assert "below F-TIS without importance weights: 1/2 seeds" in printed


@pytest.mark.hivemind
@pytest.mark.netns
def test_relay_fetch_benchmark_quick_fetches_each_size_directly_and_through_the_relay(benchmarks, capsys):
    require_netns()
    relay_fetch = benchmarks("relay_fetch")
    status = relay_fetch.main(["--quick"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    for size in ("64 KiB", "1 MiB", "8 MiB"):
        rows = table_rows(printed, size)
        assert [row[1] for row in rows] == ["direct", "relayed"], printed
        for row in rows:
            assert row[2] == row[1] and (row[3], row[4]) == ("3", "0"), printed  # the path it says, none failed
            assert row[5].endswith(" ms") and float(row[7].removesuffix(" MB/s")) > 0, printed
    first = re.search(r"first fetch of its batch succeeded after ([\d.]+) s \(\d+ attempts?, via relayed\)", printed)
    assert first and float(first.group(1)) > 0, printed


def test_relay_fetch_benchmark_sums_fetches_up_per_size_and_path(benchmarks):
    relay_fetch = benchmarks("relay_fetch")

    def fetch(label, round_, seconds, warmup=False, via=None, error=None):
        return {"label": label, "round": round_, "bytes": 2_000_000 * (round_ + 1), "seconds": seconds,
                "warmup": warmup, "via": [label] if via is None else via, "error": error}

    fetches = [fetch("direct", 0, 9.0, warmup=True), fetch("direct", 0, 0.01), fetch("direct", 0, 0.03),
               fetch("direct", 0, 0.02), fetch("relayed", 0, 0.04), fetch("relayed", 0, None, via=[], error="reset"),
               fetch("relayed", 0, 0.02), fetch("direct", 1, 0.1), fetch("relayed", 1, 0.3)]
    direct, relayed, direct_1, relayed_1 = relay_fetch.summarize(fetches, [2 * relay_fetch.MIB, 4 * relay_fetch.MIB])
    assert (direct["fetches"], direct["failed"], direct["median_s"]) == (3, 0, 0.02)  # the warm-up left out
    assert direct["p90_s"] == pytest.approx(0.028) and direct["mb_s"] == pytest.approx(100.0)
    assert (relayed["fetches"], relayed["failed"], relayed["median_s"]) == (3, 1, pytest.approx(0.03))
    assert relayed["relayed_over_direct"] == pytest.approx(1.5) and relayed["errors"] == ["reset"]
    assert relayed_1["relayed_over_direct"] == pytest.approx(3.0) and "relayed_over_direct" not in direct_1
    startup = relay_fetch.Startup(4.0, None, 21.5, 3, ["relayed"])
    cpu = relay_fetch.Cpu(0.5, {"direct": 0.2, "relayed": 0.9}, {"direct": 50.0, "relayed": 100.0}, 2.0)
    lines = relay_fetch.format_report([direct, relayed], startup, cpu)
    printed = "\n".join(lines)
    assert table_rows(printed, "2 MiB")[1][1:] == ["relayed", "relayed", "3", "1", "30.0 ms", "38.0 ms", "66.7 MB/s",
                                                   "1.50× the time"]
    assert "2 MiB relayed: failed: reset" in printed
    assert "relayed address (not seen), first fetch of its batch succeeded after 21.5 s (3 attempts, via relayed)" \
        in printed
    assert "p2pd CPU per MB fetched: the relay 5.0 ms; the serving peer 4.0 ms direct, 9.0 ms relayed" in printed
    assert "go-libp2p's default limits" not in printed  # one failure, and not of that kind

    def cut(read):
        return fetch("relayed", 0, None, via=[], error=f"IncompleteReadError: {read} bytes read on a total of 9")

    rows = relay_fetch.summarize([fetch("direct", 0, 0.01), fetch("relayed", 0, 0.02), cut(32760), cut(98304)],
                                 [2 * relay_fetch.MIB])
    assert "the relay applied go-libp2p's default limits" in "\n".join(relay_fetch.format_report(rows, None))
    rows = relay_fetch.summarize([fetch("direct", 0, 0.01), cut(32760), cut(500_000)], [2 * relay_fetch.MIB])
    assert not relay_fetch.cut_at_default_relay_limit(rows)  # one broke off later: something else


def test_relay_fetch_benchmark_says_why_it_cannot_build_namespaces(benchmarks, monkeypatch, capsys):
    netns = benchmarks("netns")
    monkeypatch.setattr(netns, "cannot_build", lambda: "network namespaces need root (ip netns add)")
    assert benchmarks("relay_fetch").main(["--quick"]) == 2
    assert "cannot build the NAT topology: network namespaces need root" in capsys.readouterr().err


def test_swarm_policy_quick_drives_the_nodes_own_sampling_and_meets_its_goals(benchmarks, capsys):
    policy = benchmarks("swarm_policy")
    from ftis.node.swarm.dht import sampling
    from ftis.node.swarm.exchange import budget
    from ftis.node.swarm.peers import reputation

    # the node's own code, not a copy
    assert (policy.Sampler, policy.rank_offers, policy.pick) == (sampling.Sampler, budget.rank_offers, budget.pick)
    assert policy.Reputation is reputation.Reputation
    policy.main(["--quick"])
    printed = capsys.readouterr().out
    rows = {int(row[2].replace(",", "")): row for row in table_rows(printed, "") if row[1] == "honest"}
    assert set(rows) == {100, 1000}, printed
    reads = [float(rows[n][4].replace(",", "")) for n in rows]
    assert max(reads) <= 1.1 * min(reads), printed  # per-node reads flat across N
    assert all(rows[n][7] == "100.00%" for n in rows), printed  # every step its budget
    assert "MISSED" not in printed, printed


def test_re_dating_sybils_with_new_identities_take_slots_but_not_the_honest_batches_of_a_step(benchmarks):
    """16 identities beside 8 honest peers, each announcing a batch dated now at every poll, serving garbage, and
    taking a new identity (a full score) every 2 s: they take fetch slots, and steps still get 3/4 of their
    budget in honest batches and more (docs/swarm.md: a drop over a quarter would call for a fix)."""
    policy = benchmarks("swarm_policy")
    clean = policy.simulate(9, 4, 150.0, 0, "honest")
    attacked = policy.simulate(9, 4, 150.0, 0, "sybils-16-new")
    assert attacked.hostile_fetches > 0.1  # they did take slots
    assert clean.honest_per_step == 4.0
    assert attacked.honest_per_step >= 0.75 * clean.honest_per_step


def test_real_speed_measures_a_ceiling_and_says_why_llama_cpp_is_left_out(benchmarks, monkeypatch, tmp_path):
    speed = benchmarks("real_speed")
    monkeypatch.setattr(speed, "MATRIX", 256)
    monkeypatch.setattr(speed, "PROBE", 128)
    rate = speed.ceiling("float32", 1)
    assert rate is not None and 1e8 < rate < 1e13  # FLOP/s of a real product, not a constant
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # an import of it fails
    assert "pip install llama-cpp-python" in speed.why_no_llama(tmp_path / "model.gguf")
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))
    assert speed.why_no_llama(None) == "no GGUF file given (--gguf NAME=FILE)"
    assert speed.why_no_llama(tmp_path / "model.gguf") == f"no GGUF file at {tmp_path / 'model.gguf'}"
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    assert speed.why_no_llama(tmp_path / "model.gguf") is None


def test_tokenizations_lists_every_segmentation_into_the_vocabulary(benchmarks):
    gap = benchmarks("tokenization_gap")
    pieces = {"1": [10], "2": [11], "12": [12], "<a>": [13], "<": [14], "a": [15], ">": [16]}
    assert sorted(gap.tokenizations("12", pieces)) == [(10, 11), (12,)]
    assert sorted(gap.tokenizations("<a>1", pieces)) == [(13, 10), (14, 15, 16, 10)]  # a tag, or its characters
    assert gap.tokenizations("", pieces) == [()]
    assert gap.tokenizations("13", pieces) == []  # "3" is no piece: no tokenization
    assert len(gap.tokenizations("12" * 8, pieces)) == 2**8
    with pytest.raises(gap.TooManyTokenizations):
        gap.tokenizations("12" * 8, pieces, limit=255)


def test_tokenization_gap_quick_scores_every_tokenization_and_finds_none_for_characters(benchmarks, monkeypatch,
                                                                                         tmp_path, capsys):
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "cache"))  # the quick warm starts: 20 steps, seconds
    benchmarks("tokenization_gap").main(["--quick"])
    printed = capsys.readouterr().out
    for label in ("small-bpe", "small"):
        (row,) = [row for row in table_rows(printed, label) if len(row) == 9 and row[1].isdigit()]  # the first table
        samples, left_out = int(row[1]), int(row[2])
        assert samples + left_out == 6 * 4 and samples > 0, printed
        assert float(row[8]) < 1e-4, printed  # the generator's sampler log-probs are the teacher-forced ones
    # the character tokenizer spells a text one way (but for the tags): no gap, the weight exact
    figures = {row[1]: row for row in table_rows(printed, "small") if len(row) == 8}
    for name in ("δ_c = log π(y) − log π(τ_c)", "δ_s = log π(y) − log π(τ_s)"):
        assert float(figures[name][6]) == 0, printed
    assert float(figures["weight factor exp((δ_s − δ_c)/L)"][6]) == 1, printed
    assert re.search(r"small-bpe → small +\| +\d+ \|", printed) and re.search(r"small → small-bpe +\| +\d+ \|", printed)
    # the same samples, each normalised by each candidate L (benchmarks/length_normaliser.py)
    benchmarks("length_normaliser").main(["--quick", "--models", "small-bpe,small"])
    printed = capsys.readouterr().out
    for label in ("small-bpe → small-bpe", "small → small", "small-bpe → small", "small → small-bpe"):
        assert len([row for row in table_rows(printed, label) if len(row) == 11]) == 3, printed  # one row per L
    (check,) = [row for row in table_rows(printed, "small → small") if len(row) == 5]  # x̄ = the per-token mean
    assert check[1] == check[2] and float(check[3]) < 1e-4, printed


def test_length_normaliser_figures_on_hand_built_log_ratios(benchmarks):
    normaliser = benchmarks("length_normaliser")
    log_ratios = np.array([0.0, -2.0, 4.0, -30.0])  # (S,) log π_gen − log π_θold
    by_tokens = normaliser.figures(log_ratios, np.array([2.0, 2.0, 2.0, 2.0]), C=2.0, g=10.0)
    # x̄ = 0, −1, 2, −15: weights 1, e, e^−2, e^15; k3 = 0, 0.37, 4.39, 14
    assert by_tokens.p50 == pytest.approx(-0.5)
    assert by_tokens.truncated == 0.5  # e and e^15 above C = 2
    assert by_tokens.flagged == 0.25  # −15 only: k3(2) = 4.39 < 10
    assert by_tokens.flagged_small == 0.5  # 2 and −15 over g = 1
    by_characters = normaliser.figures(log_ratios, np.array([6.0, 6.0, 6.0, 6.0]), C=2.0, g=10.0)
    # three times the units: x̄ = 0, −1/3, 2/3, −5: one weight above C (e^5), none over g = 10, one over g = 1
    assert by_characters.truncated == 0.25 and by_characters.flagged == 0
    assert by_characters.flagged_small == 0.25  # k3(−5) = 4.0; k3(2/3) = 0.28
