"""The poisoning benchmark (``benchmarks/poisoning.py``) on a tiny configuration: what must hold whatever the noise.
The wrong-answer attacker (a data set the node lacks) never reaches a step of a node that does not trust peers'
answers, which then trains exactly as the clean one; with peers' answers trusted and ``nois`` every attacker group is
trained on, its fixed answer pushed up; with trusted answers and F-TIS the filter drops its log-prob-0 claims. The
out-of-context attacker, which claims the victim's starting model's log-probs, passes F-TIS's filter: every poisoned
completion is trained up.

Run: python -m pytest tests/test_poisoning.py -q
"""

import copy
import importlib
import math
from pathlib import Path

import pytest

from ftis.node.config import LossConfig, TaskConfig

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 2

with pytest.MonkeyPatch.context() as patch:  # benchmarks/ is a folder at the repository root, not a package
    patch.syspath_prepend(str(REPO))
    poisoning = importlib.import_module("benchmarks.poisoning")
    attacker = importlib.import_module("benchmarks.poisoning_attacks.attacker")
    report = importlib.import_module("benchmarks.poisoning_attacks.report")

Cell = poisoning.BenchCell
CELLS = [Cell("clean", 0, None), Cell("ftis", 0, "out-of-context"), Cell("ftis", 0, "wrong-answer"),
         Cell("undefended", 0, "wrong-answer"), Cell("filter-only", 0, "wrong-answer")]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Five cells at one seed, on nearly cold models (warm-ups of 2 steps, cached in a temporary folder): few rounds,
    prompts and problems."""
    data = copy.deepcopy(poisoning.GRID)
    data.update(rounds=ROUNDS, eval_every=ROUNDS, eval_problems=4)
    data["node"]["generation"].update(prompts_per_round=2)
    cache = str(tmp_path_factory.mktemp("cache"))
    for spec in data["models"].values():
        spec["warmup"] = {**spec["warmup"], "steps": 2, "batch_size": 4, "eval_problems": 4, "cache_dir": cache}
    grid = poisoning.benchmark_grid(swarm=3, conditions=["clean", "ftis", "undefended", "filter-only"], data=data)
    out = tmp_path_factory.mktemp("poisoning")
    found = poisoning.run_benchmark(grid, CELLS, out, echo=lambda line: None)
    # --report: the stored cells read back, and a cell not stored left out rather than run
    stored = poisoning.run_benchmark(grid, [*CELLS, Cell("ftis", 1, "dos")], out, echo=lambda line: None, run=False)
    assert [(r["condition"], r["seed"], r["fingerprint"]) for r in stored] == [
        (r["condition"], r["seed"], r["fingerprint"]) for r in found]
    return {(record["condition"], record["poisoning"]["attack"]): record for record in found}


def audits(record):
    return record["poisoning"]["nodes"].values()


def test_an_untrusted_foreign_data_set_never_reaches_a_step_and_the_nodes_train_as_clean(records):
    attacked, clean = records["ftis", "wrong-answer"], records["clean", None]
    for audit in [*audits(attacked), *audits(clean)]:
        assert audit["groups"] == [0] * ROUNDS and sum(audit["raised"]) == 0
    for label, node in attacked["nodes"].items():
        assert node["id_accuracy"] == clean["nodes"][label]["id_accuracy"]
        assert node["steps"]["own_reward"] == clean["nodes"][label]["steps"]["own_reward"]


def test_undefended_nodes_raise_the_fixed_answer_of_every_attacker_group(records):
    settings = attacker.AttackSettings()
    half = settings.group_size // 2
    for audit in audits(records["undefended", "wrong-answer"]):
        assert audit["groups"] == [settings.groups] * ROUNDS  # the mix takes all 16 beside the peer's 2
        assert audit["raised"] == [settings.groups * half] * ROUNDS
        assert audit["lowered"] == [settings.groups * (settings.group_size - half)] * ROUNDS


def test_the_filter_drops_log_prob_zero_claims_but_keeps_the_starting_models(records):
    half = attacker.AttackSettings().group_size // 2
    for audit in audits(records["filter-only", "wrong-answer"]):
        # claimed log-prob 0, far from a cold model's (about -log(vocabulary) a token): D > g
        assert audit["groups"][0] == attacker.AttackSettings().groups and sum(audit["raised"]) == 0
    victim = records["ftis", "out-of-context"]["poisoning"]["nodes"][poisoning.VICTIM]
    # the victim's starting model's own log-probs: D ≈ 0 at its first step, every poisoned completion trained up
    assert victim["raised"][0] == attacker.AttackSettings().groups * half


def test_every_evaluation_measures_every_attack(records):
    for record in records.values():
        for node in record["poisoning"]["nodes"].values():
            for attack in poisoning.DEFAULT_ATTACKS:
                assert len(node["success"][attack]) == 2  # round 0 and the last
                assert all(0.0 <= value <= 1.0 for value in node["success"][attack])
                assert all(value < 0 for value in node["payload_logprob"][attack])
            assert len(node["mean_tokens"]) == 2


def test_the_report_pairs_every_attacked_row_with_clean(records):
    rows = report.summarize(list(records.values()), ["small", "medium"], ["out-of-context", "wrong-answer", "dos"],
                            ["clean", "undefended", "ftis", "filter-only"])
    found = {(row.attack, row.condition, row.node) for row in rows}
    assert ("out-of-context", "ftis", "small") in found and ("wrong-answer", "filter-only", "medium") in found
    assert ("out-of-context", "undefended", "small") not in found  # not run
    assert ("dos", "clean", "small") in found  # clean rows in every attack's block
    assert all(row.delta_end.n == 1 for row in rows if row.condition != "clean")
    dos = next(row for row in rows if row.attack == "dos" and row.condition == "clean")
    assert dos.values["success_end"].mean == 1.0  # a length over clean's own
    assert "| out-of-context | ftis | small |" in report.table(rows)
    assert "| wrong-answer | undefended | medium | success |" in report.curves_table(rows, [0, ROUNDS])
    undefended = next(row for row in rows if row.attack == "wrong-answer" and row.condition == "undefended")
    assert undefended.values["groups_share"].mean == 100.0  # every group the attacker published reached the steps


def test_every_condition_sets_the_defence_explicitly():
    for name, setting in poisoning.CONDITIONS.items():
        node = poisoning.condition_node(setting, None)
        assert node["task"] == {"trust_peer_answers": setting.trust_peer_answers, "check_steps": setting.defence}
        # off: the bound at its off value; on: the node's default, or the benchmark's --max-surprise
        assert node["loss"] == ({} if setting.defence else {"max_surprise": math.inf}), name
        if setting.defence:
            assert poisoning.condition_node(setting, 3.0)["loss"] == {"max_surprise": 3.0}
    assert TaskConfig().check_steps and math.isfinite(LossConfig().max_surprise)  # the defended ones rest on these


def test_the_real_setup_attacks_the_real_demos_models_on_their_task_with_written_reasoning():
    real = poisoning.REAL
    grid = poisoning.benchmark_grid(conditions=["clean", "defended"], setup=real)
    assert set(grid.models) == {"smollm2", "gemma"} and real.victim in grid.models
    victim = grid.node_config(real.victim, "defended", 0, Path("m"))
    assert grid.models[real.victim].name == "smollm2-135m-instruct" and victim.model.adapter == "full"
    assert victim.task.arithmetic.format == "tags" and victim.task.few_shot == 8 and victim.task.check_steps
    assert victim.generation.stop == ["</answer>"] and victim.mix.max_peer_groups == 16
    assert grid.node_config("gemma", "clean", 0, Path("m")).loss.max_surprise == math.inf  # clean: defences off
    assert real.settings.groups == victim.generation.prompts_per_round  # as many groups as an honest node
    assert "in-context-sum" in real.attacks and "in-context" not in real.attacks  # two operands: no partial result
    assert poisoning.fingerprint(grid, Cell("defended", 0, "dos"), real) != poisoning.fingerprint(
        grid, Cell("defended", 0, "dos"))  # a real cell is never read as a tiny one's
    with pytest.raises(ValueError, match="swarm of 4"):
        poisoning.benchmark_grid(swarm=4, conditions=["clean"], setup=real)
