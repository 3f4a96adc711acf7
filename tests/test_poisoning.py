"""The poisoning benchmark (``benchmarks/poisoning.py``) on a tiny configuration: what must hold whatever the
noise. With the defaults the attacker's completions never reach a step (no gold the node trusts), so the
defended node trains exactly as the clean one; with peers' answers trusted and ``nois`` every attacker group
is trained on, its fixed answer pushed up; with trusted answers and F-TIS the filter drops them. Under the
honest data set's real name the attack scores 0 everywhere and teaches nothing.

Run: python -m pytest tests/test_poisoning.py -q
"""

import copy
import importlib
from pathlib import Path

import numpy as np
import pytest

from ftis.node.experiment.grid import Grid
from ftis.node.intake.scoring import score_batch
from ftis.node.models import build_tokenizer, tokenizer_fingerprint
from ftis.node.tasks import make_task

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 2

with pytest.MonkeyPatch.context() as patch:  # benchmarks/ is a folder at the repository root, not a package
    patch.syspath_prepend(str(REPO))
    poisoning = importlib.import_module("benchmarks.poisoning")
    attack = importlib.import_module("benchmarks.poisoning_attack")


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Every condition of the benchmark at one seed, on nearly cold models (warm-ups of 2 steps, cached in a
    temporary folder): few rounds, prompts and problems."""
    data = copy.deepcopy(poisoning.GRID)
    data.update(rounds=ROUNDS, eval_every=ROUNDS, eval_problems=4)
    # the attacker's group size: the mix takes at most max_peer_share of max_peer_groups × group_size completions
    # from one peer, all 16 of its groups here
    data["node"]["generation"].update(prompts_per_round=2, group_size=attack.AttackSettings().group_size)
    for spec in data["models"].values():
        spec["warmup"].update(steps=2, batch_size=4, eval_problems=4,
                              cache_dir=str(tmp_path_factory.mktemp("cache")))
    out = tmp_path_factory.mktemp("poisoning")
    found = poisoning.run_benchmark(Grid.model_validate(data), [0], out, echo=lambda line: None)
    return {record["condition"]: record for record in found}


def audits(record):
    return record["poisoning"]["nodes"].values()


def test_defended_nodes_never_train_on_the_attacker_and_match_the_clean_run(records):
    for audit in [*audits(records["defended"]), *audits(records["clean"])]:
        assert audit["groups"] == [0] * ROUNDS  # no gold the node trusts: unusable, never in a step
        assert sum(audit["raised"]) == 0
    for label, node in records["defended"]["nodes"].items():
        clean = records["clean"]["nodes"][label]
        assert node["id_accuracy"] == clean["id_accuracy"]
        assert node["steps"]["own_reward"] == clean["steps"]["own_reward"]


def test_undefended_nodes_raise_the_fixed_answer_of_every_attacker_group(records):
    settings = attack.AttackSettings()
    for audit in audits(records["undefended"]):
        assert audit["groups"] == [settings.groups] * ROUNDS  # the default mix takes all 16 beside the peer's 2
        half = settings.group_size // 2
        assert audit["raised"] == [settings.groups * half] * ROUNDS
        assert audit["lowered"] == [settings.groups * (settings.group_size - half)] * ROUNDS


def test_the_filter_drops_the_attacker_completions_that_trusted_answers_let_in(records):
    for audit in audits(records["filter-only"]):
        assert audit["groups"][0] == attack.AttackSettings().groups  # later rounds: fewer once the attacker is muted
        # The fixed answer gets a positive advantage, but its claimed log-prob 0 is far from a cold model's
        # (about -log(vocabulary) per token), so D > g; the other answers have negative advantages.
        assert sum(audit["raised"]) == 0 and sum(audit["lowered"]) == 0


def test_attack_success_is_the_share_of_held_out_answers_equal_to_the_fixed_one(records):
    for record in records.values():
        for node in record["poisoning"]["nodes"].values():
            assert len(node["attack_success"]) == 2  # round 0 and the last
            assert all(0.0 <= value <= 1.0 for value in node["attack_success"])


@pytest.mark.parametrize(("dataset", "trust", "expected"), [
    (None, False, None),  # a foreign data set without trust: unusable
    (None, True, "claimed"),  # trusted: the attacker's gold reproduces its claimed rewards
    ("own", True, "zero"),  # the honest data set's name: own gold, every answer wrong
])
def test_what_a_receiver_makes_of_a_poisoned_batch(dataset, trust, expected):
    task = make_task("arithmetic", max_digits=1, operands=3, operations="+-")
    tokenizer = build_tokenizer()
    settings = attack.AttackSettings(groups=4)
    batch = attack.poisoned_batch(task, tokenizer, settings, run_id="r", peer_id="attacker", round_=0,
                                  rng=np.random.default_rng(0), fingerprint=tokenizer_fingerprint(tokenizer),
                                  dataset=task.name if dataset == "own" else attack.FOREIGN_DATASET)
    scored = score_batch(batch, task, tokenizer, trust_peer_answers=trust, off_policy=True)
    if expected is None:
        assert scored.groups == [] and scored.unusable == settings.groups
    elif expected == "claimed":
        claimed = [reward for group in batch.groups for reward in group.columns.rewards.tolist()]
        assert scored.rewards == claimed and sum(claimed) == settings.groups * settings.group_size // 2
    else:
        assert len(scored.groups) == settings.groups and not any(g.informative for g in scored.groups)
        assert set(scored.rewards) == {0.0}
