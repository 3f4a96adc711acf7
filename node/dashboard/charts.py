"""The dashboard's plots, each line named by the figure it draws: a figure is declared once
(``RoundReport`` in ``records/round_report.py``, ``StepFigures`` in ``trainer/step_figures.py``,
``SwarmFigures``), and its record key, its label (the TensorBoard tag) and its unit are read from that
declaration here, so that a renamed figure breaks this table at import rather than a plot in silence.
"""

from dataclasses import dataclass

from ftis.node.figures import Figure, Unit, declared
from ftis.node.records.round_report import RoundReport, SwarmFigures
from ftis.node.trainer.step_figures import FIGURES, record_key


@dataclass(frozen=True)
class Line:
    key: str  # in the metrics.jsonl records
    label: str  # the figure's TensorBoard tag
    unit: Unit


@dataclass(frozen=True)
class Chart:
    title: str
    lines: tuple[Line, ...]
    zero_to_one: bool = False  # an axis from 0 to 1 (accuracies, fractions), else one that fits the values


def _line(key: str, where: Figure) -> Line:
    if where.tag is None:
        raise ValueError(f"the figure {key} has no tag to label it with")
    return Line(key, where.tag, where.unit)


def _round(name: str) -> Line:
    return _line(name, declared(RoundReport)[name])


def _step(name: str) -> Line:
    return _line(record_key(name), FIGURES[name])


def _swarm(name: str) -> Line:  # SwarmFigures enters the record with no prefix
    return _line(name, declared(SwarmFigures)[name])


CHARTS: tuple[Chart, ...] = (
    Chart("reward (sampling accuracy)", (_round("own_reward"), _round("peer_reward")), zero_to_one=True),
    Chart("held-out accuracy", (_round("eval_accuracy"),), zero_to_one=True),
    Chart("filtered fraction, by reason", (_step("filtered_fraction"), _step("filtered_advantage_fraction"),
                                           _step("filtered_divergence_fraction")), zero_to_one=True),
    Chart("IS weight", (_step("is_weight_mean"), _step("is_weight_max"))),
    Chart("own samples against the trainer", (_step("own_logprob_gap"), _step("own_ratio_outside"),
                                              _step("own_filtered_fraction"))),
    Chart("traffic (bytes per round)", (_swarm("bytes_sent"), _swarm("bytes_received"))),
    Chart("utilisation (share of the loop's wall time)", (_round("utilisation"),), zero_to_one=True),
)

LINES: tuple[Line, ...] = tuple(line for chart in CHARTS for line in chart.lines)


def layout() -> list[dict[str, object]]:
    """The charts as the page draws them (JSON-ready)."""
    return [{"title": chart.title, "zero_to_one": chart.zero_to_one,
             "lines": [{"key": line.key, "label": line.label, "unit": line.unit} for line in chart.lines]}
            for chart in CHARTS]
