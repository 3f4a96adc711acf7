"""The demo's end: per node, held-out accuracy at the start (the warm start, before any GRPO step) and at
the end, the mean over every evaluation (the area under the curve, steadier than the last point), and,
when the solo baseline ran, what the same model reached alone on-policy from the same warm start and
seed in as many rounds, and the end's lead over it in standard errors of the difference (``end − solo``: the
two evaluations are independent, so sqrt(se_end² + se_solo²)); the start, the end and the solo end carry their
own standard error (``0.517 ± 0.029``). Also what the swarm moved: peers' groups trained on, filtered share, IS weight,
bytes; and each node's utilisation, the share of its wall time spent generating or training (after round 0,
whose time holds the start-up: ``records/utilisation.py``).

When the task names skills (arithmetic: carry / no-carry), each node's *weakest skill* is the one it was
worst at in its first evaluation (the specialist's: carry), with its accuracy at the start and the end,
swarm and solo: what a node learns from peers that have the skill shows there first. ``headline`` is the
sentence above the table: what the user is looking at, and each evaluation's standard error, the noise
any difference is read against.

    rows = [summarize(swarm_progress, solo_progress_or_none), ...]
    print(markdown(rows, solo_ran=True))   # also written to DIR/summary.md; as_json(rows) to summary.json
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rich import box
from rich.table import Table

from ftis.node.demo.follow import NodeProgress
from ftis.node.records.display import size
from ftis.node.records.utilisation import laps_of, work_share

SOLO_NOT_RUN = "solo baseline: not run (`--no-solo` or `[demo] solo = false`)"


@dataclass(frozen=True)
class NodeSummary:
    name: str
    model: str
    adapter: str
    rounds: int  # step records written
    evaluations: int
    start_accuracy: float | None  # the first evaluation (round 0: the warm start); None without evaluations
    end_accuracy: float | None  # the last evaluation
    mean_accuracy: float | None  # over every evaluation
    peer_groups_used: int  # peers' groups trained on, all steps
    filtered_fraction: float | None  # mean over the steps that trained
    is_weight_mean: float | None  # mean over the steps that trained
    bytes_sent: int
    bytes_received: int
    utilisation: float | None  # share of wall time generating or training, rounds after round 0 (utilisation.py)
    solo_end_accuracy: float | None = None  # the solo baseline's, when it ran
    solo_mean_accuracy: float | None = None
    weakest_skill: str | None = None  # the skill it was worst at in its first evaluation (None: no skills)
    skill_start: float | None = None  # ...its accuracy on it then, at the end, and the solo run's at the end
    skill_end: float | None = None
    solo_skill_end: float | None = None
    standard_error: float | None = None  # of one evaluation (the first): the noise of its accuracy figures
    start_error: float | None = None  # the standard errors of the start, the end and the solo run's end
    end_error: float | None = None
    solo_end_error: float | None = None

    @property
    def change(self) -> float | None:
        if self.start_accuracy is None or self.end_accuracy is None:
            return None
        return self.end_accuracy - self.start_accuracy

    @property
    def ahead_of_solo(self) -> float | None:
        """The end's accuracy minus the solo run's."""
        if self.end_accuracy is None or self.solo_end_accuracy is None:
            return None
        return self.end_accuracy - self.solo_end_accuracy

    @property
    def ahead_of_solo_errors(self) -> float | None:
        """``ahead_of_solo`` in standard errors of that difference (two independent evaluations)."""
        if self.ahead_of_solo is None or self.end_error is None or self.solo_end_error is None:
            return None
        error = (self.end_error**2 + self.solo_end_error**2) ** 0.5
        return self.ahead_of_solo / error if error > 0 else None


def summarize(swarm: NodeProgress, solo: NodeProgress | None = None) -> NodeSummary:
    accuracies = [evaluation.accuracy for evaluation in swarm.evaluations]
    trained = [step for step in swarm.steps if step["train_trained"]]
    last = swarm.latest_step
    solo_accuracies = [evaluation.accuracy for evaluation in solo.evaluations] if solo is not None else []
    first = swarm.evaluations[0] if swarm.evaluations else None
    weakest = min(first.skills, key=first.skills.get) if first is not None and first.skills else None
    solo_skill = solo.evaluations[-1].skills.get(weakest) if weakest and solo is not None and solo.evaluations else None
    return NodeSummary(
        name=swarm.name,
        model=swarm.model,
        adapter=swarm.adapter,
        rounds=len(swarm.steps),
        evaluations=len(accuracies),
        start_accuracy=accuracies[0] if accuracies else None,
        end_accuracy=accuracies[-1] if accuracies else None,
        mean_accuracy=_mean(accuracies),
        peer_groups_used=sum(step["peer_groups_used"] for step in swarm.steps),
        filtered_fraction=_mean([step["train_filtered_fraction"] for step in trained]),
        is_weight_mean=_mean([step["train_is_weight_mean"] for step in trained]),
        bytes_sent=0 if last is None else last["bytes_sent_total"],
        bytes_received=0 if last is None else last["bytes_received_total"],
        utilisation=work_share(laps) if (laps := laps_of(swarm.steps[1:])) else None,
        solo_end_accuracy=solo_accuracies[-1] if solo_accuracies else None,
        solo_mean_accuracy=_mean(solo_accuracies),
        weakest_skill=weakest,
        skill_start=first.skills[weakest] if weakest else None,
        skill_end=swarm.evaluations[-1].skills.get(weakest) if weakest else None,
        solo_skill_end=solo_skill,
        standard_error=first.standard_error if first is not None else None,
        start_error=first.standard_error if first is not None else None,
        end_error=swarm.evaluations[-1].standard_error if swarm.evaluations else None,
        solo_end_error=solo.evaluations[-1].standard_error if solo is not None and solo.evaluations else None,
    )


def headline(rows: Sequence[NodeSummary], solo_ran: bool) -> str:
    """One sentence on what the table shows, and the noise to read it against."""
    errors = [row.standard_error for row in rows if row.standard_error is not None]
    noise = f" One evaluation's standard error is about {100 * max(errors):.1f} points." if errors else ""
    compared = (" beside the same model trained alone (solo) from the same start" if solo_ran else "")
    lead = " 'end − solo' counts its standard errors (SE)." if solo_ran else ""
    return (f"Each node's held-out greedy accuracy (± one standard error) before its first GRPO step and after the "
            f"last, in the swarm{compared}; 'weakest skill' is what it was worst at to begin with.{noise}{lead}")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


HEADERS = ("node", "model", "rounds", "accuracy start", "accuracy end", "change", "mean (all evals)",
           "solo end", "solo mean", "end − solo", "weakest skill", "skill start", "skill end", "solo skill end",
           "peer groups used", "filtered", "IS w", "sent", "recv", "utilisation")
_SOLO = ("solo end", "solo mean", "end − solo", "solo skill end")
# The terminal's table: shorter headers, without the rounds (in the title), the means and the traffic (the live
# table showed it), so that it fits a 120-column terminal.
_TERMINAL = {"node": "node", "model": "model", "accuracy start": "acc\nstart",
             "accuracy end": "acc\nend", "change": "change", "solo end": "solo\nend", "end − solo": "end −\nsolo",
             "weakest skill": "weakest\nskill", "skill end": "skill\nend", "solo skill end": "solo\nskill end",
             "filtered": "filtered"}


def cells(row: NodeSummary) -> dict[str, str]:
    values = [
        row.name, f"{row.model} ({row.adapter})", str(row.rounds),
        _accuracy(row.start_accuracy, row.start_error), _accuracy(row.end_accuracy, row.end_error), _signed(row.change),
        _accuracy(row.mean_accuracy), _accuracy(row.solo_end_accuracy, row.solo_end_error),
        _accuracy(row.solo_mean_accuracy), _versus(row),
        row.weakest_skill or "-", _accuracy(row.skill_start), _accuracy(row.skill_end), _accuracy(row.solo_skill_end),
        str(row.peer_groups_used),
        "-" if row.filtered_fraction is None else f"{row.filtered_fraction:.0%}",
        "-" if row.is_weight_mean is None else f"{row.is_weight_mean:.2f}",
        size(row.bytes_sent), size(row.bytes_received),
        "-" if row.utilisation is None else f"{row.utilisation:.0%}",
    ]
    return dict(zip(HEADERS, values, strict=True))


def rich_table(rows: Sequence[NodeSummary], solo_ran: bool) -> Table:
    """The summary for the terminal; the solo columns only when the baseline ran."""
    rounds = "/".join(str(count) for count in sorted({row.rounds for row in rows}))
    table = Table(title=f"ftis-node demo: held-out greedy accuracy, start vs end of {rounds} rounds",
                  caption=None if solo_ran else SOLO_NOT_RUN, box=box.SIMPLE_HEAD, show_edge=False,
                  header_style="bold")
    keep = [header for header in _columns(solo_ran) if header in _TERMINAL]
    for header in keep:
        table.add_column(_TERMINAL[header], justify="left" if header in ("node", "model") else "right", no_wrap=True)
    for row in rows:
        values = cells(row)
        table.add_row(*(values[header] for header in keep))
    return table


def markdown(rows: Sequence[NodeSummary], solo_ran: bool) -> str:
    keep = _columns(solo_ran)
    lines = ["| " + " | ".join(keep) + " |", "|" + "|".join("---" for _ in keep) + "|"]
    for row in rows:
        values = cells(row)
        lines.append("| " + " | ".join(values[header] for header in keep) + " |")
    if not solo_ran:
        lines += ["", SOLO_NOT_RUN]
    return "\n".join(lines) + "\n"


def as_json(rows: Sequence[NodeSummary], solo_ran: bool) -> dict[str, Any]:
    return {"solo_ran": solo_ran, "nodes": [asdict(row) | {"change": row.change, "ahead_of_solo": row.ahead_of_solo,
                                                           "ahead_of_solo_errors": row.ahead_of_solo_errors}
                                            for row in rows]}


def _columns(solo_ran: bool) -> list[str]:
    return [header for header in HEADERS if solo_ran or header not in _SOLO]


def _accuracy(value: float | None, error: float | None = None) -> str:
    """``0.517``, or ``0.517 ± 0.029`` with its standard error."""
    return "-" if value is None else f"{value:.3f}" if error is None else f"{value:.3f} ± {error:.3f}"


def _versus(row: NodeSummary) -> str:
    """``+0.057 (1.4 SE)``: the end above the solo run's, and how many standard errors of the difference that is."""
    if row.ahead_of_solo is None:
        return "-"
    errors = row.ahead_of_solo_errors
    return _signed(row.ahead_of_solo) + ("" if errors is None else f" ({errors:.1f} SE)")


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"
