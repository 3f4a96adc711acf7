"""The demo's PNG: held-out greedy accuracy of each node over rounds (solid), and of its solo baseline
(dashed, same colour) when that ran.

    plot_accuracy(out / "accuracy.png", swarm_nodes, solo_nodes_or_empty)

matplotlib is imported here, inside the function, with the Agg backend (no display needed): nothing
else in the node loads it.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

from ftis.node.demo.follow import NodeProgress


def plot_accuracy(path: Path, nodes: Sequence[NodeProgress], solo: Mapping[str, NodeProgress],
                  title: str = "ftis-node demo: held-out accuracy") -> Path:
    """Write the plot to ``path`` (a PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window; safe to call again
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    try:
        for index, node in enumerate(nodes):
            colour = f"C{index % 10}"
            label = f"{node.name}: {node.model} ({node.adapter})"
            axes.plot([e.round for e in node.evaluations], [e.accuracy for e in node.evaluations], marker="o",
                      markersize=3, color=colour, label=f"{label}, swarm")
            alone = solo.get(node.name)
            if alone is not None and alone.evaluations:
                axes.plot([e.round for e in alone.evaluations], [e.accuracy for e in alone.evaluations],
                          linestyle="--", color=colour, label=f"{label}, solo")
        axes.set_xlabel("round (one F-TIS step each)")
        axes.set_ylabel("greedy accuracy, held-out problems")
        axes.set_ylim(0.0, 1.0)
        axes.grid(alpha=0.3)
        axes.set_title(title)
        axes.legend(fontsize="small", loc="best")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
