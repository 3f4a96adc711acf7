"""The report's PNG figures (matplotlib, Agg backend; imported only here, inside the functions).

- ``accuracy_<split>.png``: one panel per model, greedy accuracy against rounds, one line per condition
  (mean over seeds, the band ± one standard deviation).
- ``filtering.png``: per swarm condition, the fraction of peers' completions filtered and the mean IS
  weight per round (mean over nodes and seeds, a moving average over ``SMOOTH`` rounds).
"""

import math
from collections.abc import Sequence
from pathlib import Path

from ftis.node.experiment.stats import Record, mean_curve

SMOOTH = 5  # rounds in the moving average of the per-round figures


def plot_accuracy(records: Sequence[Record], conditions: Sequence[str], models: Sequence[str], split: str,
                  title: str, path: Path) -> Path:
    """``split``: "id" or "ood" (the record's curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False, sharey=True)
    for axis, model in zip(axes[0], models, strict=True):
        for k, condition in enumerate(conditions):
            rounds, spreads = mean_curve(records, condition, model, split)
            if not rounds:
                continue
            mean = [100 * s.mean for s in spreads]
            std = [0.0 if math.isnan(s.std) else 100 * s.std for s in spreads]
            solo = not any(r["settings"]["swarm"] for r in records if r["condition"] == condition)
            axis.plot(rounds, mean, label=condition, linewidth=1.4, color=_colour(k), linestyle="--" if solo else "-")
            axis.fill_between(rounds, [m - d for m, d in zip(mean, std, strict=True)],
                              [m + d for m, d in zip(mean, std, strict=True)], color=_colour(k), alpha=0.12)
        axis.set_title(model)
        axis.set_xlabel("round")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{split.upper()} accuracy (%)")
    axes[0][-1].legend(fontsize=7, loc="best")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_filtering(records: Sequence[Record], conditions: Sequence[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    panels = (("peer_filtered_fraction", "peers' completions filtered (%)", 100.0),
              ("is_weight_mean", "mean IS weight", 1.0))
    for axis, (key, label, scale) in zip(axes, panels, strict=True):
        for k, condition in enumerate(conditions):
            series = [_per_round(record, key) for record in records if record["condition"] == condition]
            if not series or not any(record["settings"]["swarm"] for record in records
                                     if record["condition"] == condition):
                continue
            length = min(len(s) for s in series)
            mean = [_mean([s[k] for s in series]) * scale for k in range(length)]
            axis.plot(range(1, length + 1), _smoothed(mean), label=condition, linewidth=1.2, color=_colour(k))
        axis.set_xlabel("round")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:  # no swarm condition has cells yet: no lines, no legend
        axes[0].legend(fontsize=7)
    figure.suptitle(f"Filtering and IS weights per swarm condition (mean over nodes and seeds, {SMOOTH}-round "
                    "moving average)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _colour(k: int) -> str:
    """One colour per condition (its position in the grid), the same in every figure."""
    return f"C{k % 10}"


def _per_round(record: Record, key: str) -> list[float]:
    """The figure per round, averaged over the nodes that took a step that round (NaN when none did)."""
    nodes = list(record["nodes"].values())
    rounds = len(nodes[0]["steps"][key])
    return [_mean([n["steps"][key][k] for n in nodes if n["steps"]["trained"][k]]) for k in range(rounds)]


def _mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def _smoothed(values: Sequence[float]) -> list[float]:
    return [_mean(values[max(0, k - SMOOTH + 1): k + 1]) for k in range(len(values))]
