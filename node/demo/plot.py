"""The demo's PNG, two panels over rounds, a colour per node:
- top: held-out greedy accuracy at each evaluation (solid; the solo baseline dashed, when it ran);
- bottom: the node's sampling accuracy (``own_reward``: the mean reward of the completions it generated,
  temperature 1), as a moving average — what GRPO optimises directly, and less noisy than 300 problems.

    plot_accuracy(out / "accuracy.png", swarm_nodes, solo_nodes_or_empty)

The y axes fit the data (not 0–1), so read the tick labels. matplotlib is imported here, inside the
function, with the Agg backend (no display needed): nothing else in the node loads it.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

from ftis.node.demo.follow import NodeProgress

SMOOTHING = 10  # rounds in the moving average of the sampling accuracy


def plot_accuracy(path: Path, nodes: Sequence[NodeProgress], solo: Mapping[str, NodeProgress],
                  title: str = "ftis-node demo") -> Path:
    """Write the plot to ``path`` (a PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window; safe to call again
    import matplotlib.pyplot as plt

    figure, (held_out, sampled) = plt.subplots(2, 1, figsize=(7.5, 7.5), dpi=120, sharex=True)
    try:
        for index, node in enumerate(nodes):
            colour, label = f"C{index % 10}", f"{node.name}: {node.model} ({node.adapter})"
            held_out.plot([e.round for e in node.evaluations], [e.accuracy for e in node.evaluations], marker="o",
                          markersize=3, color=colour, label=label)
            rounds, rewards = moving_average(node)
            sampled.plot(rounds, rewards, color=colour, label=label)
            alone = solo.get(node.name)
            if alone is not None and alone.evaluations:
                held_out.plot([e.round for e in alone.evaluations], [e.accuracy for e in alone.evaluations],
                              linestyle="--", color=colour, label=f"{node.name} alone (solo, on-policy)")
                sampled.plot(*moving_average(alone), linestyle="--", color=colour)
        held_out.set_title(f"{title}: held-out greedy accuracy")
        held_out.set_ylabel("accuracy")
        sampled.set_title(f"sampling accuracy (own completions, moving average of {SMOOTHING} rounds)")
        sampled.set_ylabel("mean reward")
        sampled.set_xlabel("round (one F-TIS step each)")
        for axes in (held_out, sampled):
            axes.grid(alpha=0.3)
        handles, labels = held_out.get_legend_handles_labels()
        rows = (len(labels) + 1) // 2
        figure.legend(handles, labels, loc="lower center", ncol=2, fontsize="small", frameon=False)
        figure.tight_layout(rect=(0.0, 0.035 * rows, 1.0, 1.0))  # room for the legend below the panels
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path


def moving_average(node: NodeProgress, window: int = SMOOTHING) -> tuple[list[int], list[float]]:
    """Rounds and the mean ``own_reward`` of the ``window`` steps up to each (fewer at the start)."""
    known = [step for step in node.steps if step["own_reward"] is not None]  # null: NaN in the file
    rounds = [step["round"] for step in known]
    rewards = [step["own_reward"] for step in known]
    means = [sum(rewards[max(0, i + 1 - window):i + 1]) / len(rewards[max(0, i + 1 - window):i + 1])
             for i in range(len(rewards))]
    return rounds, means
