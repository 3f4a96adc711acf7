"""The report's numbers, from cell records: pure functions, no I/O.

    rows = model_rows(records, conditions, models, reference="solo")
    rows[0].values["id_auc"].mean, rows[0].deltas["id_auc"].std   # over seeds

Per cell and model (``MEASURES``): *final* is the accuracy of the last evaluation, *AUC* the mean over all
evaluations (round 0 included: every condition starts from the same warm start, so it shifts all
conditions alike); the sampling accuracy on the training prompts (the reward GRPO raises) over the
first and the last quarter of the rounds.
*Skill*: accuracy on the node's weakest skill, the one it was worst at in its first evaluation (the same
warm start in every condition, so the same skill): the specialist's carries.
Over seeds: mean and sample standard deviation (n − 1; undefined, NaN, for one seed), the standard
error of the mean (std / sqrt(n)), and how many values are positive. A *paired* difference is taken seed
by seed between two conditions (same warm start, same model seeds), over the seeds both have: it removes
the seed-to-seed spread the conditions share.

Per cell, a step figure (filtered fraction, IS weight, ...) is the mean over every node's rounds that
took an optimizer step (a round whose groups all had equal rewards takes none).
"""

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]  # one cell's JSON record (cell.py), or one node's part of it


@dataclass(frozen=True)
class Spread:
    mean: float
    std: float  # sample standard deviation; NaN when n < 2
    n: int
    positive: int = 0  # values > 0 (for paired differences: seeds where the first condition came out ahead)

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread":
        data = [float(v) for v in values if not math.isnan(float(v))]
        n = len(data)
        if n == 0:
            return cls(math.nan, math.nan, 0)
        mean = sum(data) / n
        std = math.sqrt(sum((v - mean) ** 2 for v in data) / (n - 1)) if n > 1 else math.nan
        return cls(mean, std, n, sum(v > 0 for v in data))

    @property
    def standard_error(self) -> float:
        """std / sqrt(n): the standard error of the mean (NaN when n < 2)."""
        return self.std / math.sqrt(self.n) if self.n > 1 else math.nan


@dataclass(frozen=True)
class ModelRow:
    condition: str
    model: str
    values: dict[str, Spread]  # per measure (``MEASURES``): over seeds
    deltas: dict[str, Spread]  # per measure: paired differences against the reference; empty on its own rows


@dataclass(frozen=True)
class ConditionRow:
    condition: str
    swarm: bool
    peer_filtered: Spread  # fraction of peers' completions the filter dropped
    filtered: Spread  # fraction of all completions trained on that the filter dropped
    filtered_advantage: Spread  # ...of all completions, dropped for Â ≤ 0
    filtered_divergence: Spread  # ...of all completions, dropped for D > g
    is_weight: Spread  # mean IS weight over trained tokens
    truncated: Spread  # fraction of tokens whose weight was truncated at C
    peer_groups: Spread  # peers' groups used per step
    sequence_groups: Spread  # ...of the groups trained per step, those of another tokenizer (per sequence)
    own_reward: Spread  # the nodes' own sampling accuracy over the run
    wall_seconds: Spread  # per cell


def final(curve: Sequence[float]) -> float:
    return float(curve[-1])


def auc(curve: Sequence[float]) -> float:
    """The mean over all evaluations."""
    return sum(curve) / len(curve)


def early_reward(node: Record) -> float:
    """Mean sampling accuracy on the training prompts over the first quarter of the rounds."""
    rewards = node["steps"]["own_reward"]
    return sum(rewards[:_quarter(rewards)]) / _quarter(rewards)


def late_reward(node: Record) -> float:
    """Mean sampling accuracy on the training prompts over the last quarter of the rounds."""
    rewards = node["steps"]["own_reward"]
    return sum(rewards[-_quarter(rewards):]) / _quarter(rewards)


def _quarter(values: Sequence[float]) -> int:
    return max(1, math.ceil(len(values) / 4))


def weakest_skill_curve(node: Record) -> list[float]:
    """The node's accuracy curve on the skill it was worst at in its first evaluation ([nan] without skills)."""
    skills = node.get("id_skills") or {}
    if not skills:
        return [math.nan]
    weakest = min(skills, key=lambda skill: skills[skill][0])
    return skills[weakest]


def weakest_skill(node: Record) -> str | None:
    skills = node.get("id_skills") or {}
    return min(skills, key=lambda skill: skills[skill][0]) if skills else None


# What the report shows per condition × model: a node's record -> one number.
MEASURES: dict[str, Callable[[Record], float]] = {
    "id_final": lambda node: final(node["id_accuracy"]),
    "id_auc": lambda node: auc(node["id_accuracy"]),
    "skill_final": lambda node: final(weakest_skill_curve(node)),
    "skill_auc": lambda node: auc(weakest_skill_curve(node)),
    "ood_final": lambda node: final(node["ood_accuracy"]),
    "ood_auc": lambda node: auc(node["ood_accuracy"]),
    "reward_early": early_reward,
    "reward_late": late_reward,
}


def step_mean(node: Record, key: str) -> float:
    """Mean of a step figure over the rounds where the node took a step (NaN when it never did)."""
    if key not in node["steps"]:  # a figure the cell's code did not record yet
        return math.nan
    values = [v for v, trained in zip(node["steps"][key], node["steps"]["trained"], strict=True) if trained]
    return sum(values) / len(values) if values else math.nan


def cell_step_mean(record: Record, key: str) -> float:
    """A step figure of a cell: the mean over its nodes' stepped rounds (nodes that never stepped left out)."""
    values = [v for node in record["nodes"].values() if not math.isnan(v := step_mean(node, key))]
    return sum(values) / len(values) if values else math.nan


def by_cell(records: Iterable[Record]) -> dict[tuple[str, int], Record]:
    return {(record["condition"], record["seed"]): record for record in records}


def trains_in(cells: dict[tuple[str, int], Record], condition: str, model: str) -> bool:
    """Whether ``model`` has a node in the finished cells of ``condition`` (a condition may train a subset)."""
    return any(c == condition and model in record["nodes"] for (c, _), record in cells.items())


def model_rows(records: Iterable[Record], conditions: Sequence[str], models: Sequence[str],
               reference: str) -> list[ModelRow]:
    """One row per condition × model, in the given orders, for the models each condition's cells have."""
    cells = by_cell(records)
    rows = []
    for condition in conditions:
        for model in models:
            if not trains_in(cells, condition, model):
                continue
            values, deltas = {}, {}
            for name, measure in MEASURES.items():
                mine = per_seed(cells, condition, model, measure)
                values[name] = Spread.of(mine.values())
                if condition != reference:
                    theirs = per_seed(cells, reference, model, measure)
                    deltas[name] = Spread.of(mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys()))
            rows.append(ModelRow(condition, model, values, deltas))
    return rows


@dataclass(frozen=True)
class PairRow:
    first: str  # condition
    second: str  # the condition it is compared with, seed by seed
    model: str
    deltas: dict[str, Spread]  # per measure: first − second, paired by seed


def pair_rows(records: Iterable[Record], pairs: Sequence[tuple[str, str]], models: Sequence[str]) -> list[PairRow]:
    """One row per (first, second) pair × model, for the models both conditions' cells have."""
    cells = by_cell(records)
    rows = []
    for first, second in pairs:
        for model in models:
            if not (trains_in(cells, first, model) and trains_in(cells, second, model)):
                continue
            deltas = {}
            for name, measure in MEASURES.items():
                mine, theirs = per_seed(cells, first, model, measure), per_seed(cells, second, model, measure)
                deltas[name] = Spread.of(mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys()))
            rows.append(PairRow(first, second, model, deltas))
    return rows


def per_seed(cells: dict[tuple[str, int], Record], condition: str, model: str,
             measure: Callable[[Record], float]) -> dict[int, float]:
    """{seed: ``measure`` of the model's node} over the condition's cells that have it."""
    return {seed: measure(record["nodes"][model]) for (c, seed), record in cells.items()
            if c == condition and model in record["nodes"]}


def condition_rows(records: Iterable[Record], conditions: Sequence[str]) -> list[ConditionRow]:
    """One row per condition that has cells: its step figures, mean ± std over seeds."""
    cells = by_cell(records)
    rows = []
    for condition in conditions:
        mine = [record for (c, _), record in sorted(cells.items()) if c == condition]
        if not mine:
            continue

        def over_seeds(key: str, mine: list[Record] = mine) -> Spread:
            return Spread.of(v for record in mine if not math.isnan(v := cell_step_mean(record, key)))

        rows.append(ConditionRow(
            condition=condition,
            swarm=bool(mine[0]["settings"]["swarm"]),
            peer_filtered=over_seeds("peer_filtered_fraction"),
            filtered=over_seeds("filtered_fraction"),
            filtered_advantage=over_seeds("filtered_advantage_fraction"),
            filtered_divergence=over_seeds("filtered_divergence_fraction"),
            is_weight=over_seeds("is_weight_mean"),
            truncated=over_seeds("truncated_fraction"),
            peer_groups=over_seeds("peer_groups_used"),
            sequence_groups=over_seeds("sequence_groups"),
            own_reward=over_seeds("own_reward"),
            wall_seconds=Spread.of(record["wall_seconds"] for record in mine),
        ))
    return rows


def mean_curve(records: Iterable[Record], condition: str, model: str,
               split: str) -> tuple[list[int], list[Spread]]:
    """Evaluation rounds, and per round the accuracy's spread over seeds (for plots)."""
    curves = [record["nodes"][model] for record in records
              if record["condition"] == condition and model in record["nodes"]]
    if not curves:
        return [], []
    rounds = curves[0]["eval_rounds"]
    return rounds, [Spread.of(c[f"{split}_accuracy"][k] for c in curves) for k in range(len(rounds))]
