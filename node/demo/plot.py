"""The demo's PNG, panels over rounds, a colour per node:
- top: held-out greedy accuracy at each evaluation, one standard error either side (solid; the solo baseline
  dashed, when it ran);
- middle, when the task names skills: each node's accuracy on its weakest skill at the start (the
  specialist's carries), swarm solid and solo dashed: where learning from peers shows first;
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

    skilled = any(node.evaluations and node.evaluations[0].skills for node in nodes)
    panels = 3 if skilled else 2
    figure, axes_list = plt.subplots(panels, 1, figsize=(7.5, 3.2 * panels + 1.0), dpi=120, sharex=True)
    held_out, sampled = axes_list[0], axes_list[-1]
    try:
        if skilled:
            plot_weakest_skill(axes_list[1], nodes, solo)
        for index, node in enumerate(nodes):
            colour, label = f"C{index % 10}", f"{node.name}: {node.model} ({node.adapter})"
            held_out.errorbar([e.round for e in node.evaluations], [e.accuracy for e in node.evaluations],
                              yerr=_errors(node), marker="o", markersize=3, capsize=2, color=colour, label=label)
            rounds, rewards = moving_average(node)
            sampled.plot(rounds, rewards, color=colour, label=label)
            alone = solo.get(node.name)
            if alone is not None and alone.evaluations:
                held_out.errorbar([e.round for e in alone.evaluations], [e.accuracy for e in alone.evaluations],
                                  yerr=_errors(alone), linestyle="--", capsize=2, color=colour,
                                  label=f"{node.name} alone (solo, on-policy)")
                sampled.plot(*moving_average(alone), linestyle="--", color=colour)
        held_out.set_title(f"{title}: held-out greedy accuracy (bars: one standard error)")
        held_out.set_ylabel("accuracy")
        sampled.set_title(f"sampling accuracy (own completions, moving average of {SMOOTHING} rounds)")
        sampled.set_ylabel("mean reward")
        sampled.set_xlabel("round (one F-TIS step each)")
        for axes in axes_list:
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


def _errors(node: NodeProgress) -> list[float]:
    """Each evaluation's standard error (0 where its record has none)."""
    return [e.standard_error or 0.0 for e in node.evaluations]


def plot_weakest_skill(axes, nodes: Sequence[NodeProgress], solo: Mapping[str, NodeProgress]) -> None:
    """Each node's accuracy on the skill it was worst at in its first evaluation, swarm solid, solo dashed."""
    named = []
    for index, node in enumerate(nodes):
        if not node.evaluations or not node.evaluations[0].skills:
            continue
        first = node.evaluations[0].skills
        weakest = min(first, key=first.get)
        named.append(f"{node.name}: {weakest}, {first[weakest]:.0%}")
        colour = f"C{index % 10}"
        for run, style in ((node, "-"), (solo.get(node.name), "--")):
            if run is None or not run.evaluations:
                continue
            points = [(e.round, e.skills[weakest]) for e in run.evaluations if weakest in e.skills]
            axes.plot([r for r, _ in points], [a for _, a in points], linestyle=style,
                      marker="o" if style == "-" else None, markersize=3, color=colour)
    axes.set_title("accuracy on each node's weakest skill at the start (solo dashed)\n" + "; ".join(named)
                   + " at the start",
                   fontsize="medium")
    axes.set_ylabel("accuracy")


def moving_average(node: NodeProgress, window: int = SMOOTHING) -> tuple[list[int], list[float]]:
    """Rounds and the mean ``own_reward`` of the ``window`` steps up to each (fewer at the start)."""
    known = [step for step in node.steps if step["own_reward"] is not None]  # null: NaN in the file
    rounds = [step["round"] for step in known]
    rewards = [step["own_reward"] for step in known]
    means = [sum(rewards[max(0, i + 1 - window):i + 1]) / len(rewards[max(0, i + 1 - window):i + 1])
             for i in range(len(rewards))]
    return rounds, means
