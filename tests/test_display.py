"""The terminal displays: the summary line of a step, the live rich table (rendered into a StringIO
console forced to act as a terminal), and the choice between them."""

import io
import re
import sys
from dataclasses import fields, replace

import pytest
from helpers.metrics_fakes import AFTER, BEFORE, PEER_A, PEER_B, report, step_figures
from rich.console import Console

from ftis.node.figures import Figure
from ftis.node.records.display import LineDisplay, TableDisplay, make_display, summary_line
from ftis.node.records.metrics import report_record
from ftis.node.records.round_report import rejections_by_peer
from ftis.node.trainer.step_figures import FIGURES, StepFigures

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def record(round_: int = 4, eval_accuracy: float | None = None, trained: bool = True, **changes):
    return report_record(report(round_, transport=AFTER, trained=trained, **changes), previous=BEFORE,
                         eval_accuracy=eval_accuracy)


def test_summary_line_states_the_step():
    line = summary_line(record(eval_accuracy=0.4))
    assert line.startswith("round     4  v3 ")
    for part in ("reward own 0.25 peer 0.38 eval 0.40", "groups own 2 peer 3/6 from 2 peers",
                 "loss -0.0123", "filtered 25% (adv 20% div 5%)", "IS 1.02/1.98 trunc 1%", "D 0.120",
                 "gen 125 tok/s", "train 1200 tok 600 tok/s", "sent 600 B recv 4.0 KiB",
                 "rejected 4 (hash 1, stale 3)"):
        assert part in line, part
    assert "\n" not in line


def test_summary_line_of_a_step_not_taken_and_no_peers():
    line = summary_line(record(trained=False, peer_reward=float("nan")))
    assert "peer - " in line and "eval" not in line
    assert "no step (no reward variance)" in line and "IS " not in line


def test_line_display_echoes_one_line_per_step():
    lines: list[str] = []
    display = LineDisplay(lines.append)
    display.show(record(0))
    display.show(record(1))
    display.close()
    assert [line[:11] for line in lines] == ["round     0", "round     1"]


def render_table(records, rows: int = 8, rejections=None) -> str:
    """The table the records draw, with ``rejections`` by peer (default: those of ``AFTER``)."""
    out = io.StringIO()
    display = TableDisplay(Console(file=out, force_terminal=True, width=220, color_system=None), rows)
    for r in records:
        display.show(r, rejections_by_peer(AFTER.rejections) if rejections is None else rejections)
    display.close()
    return ANSI.sub("", out.getvalue())


def last_drawing(text: str) -> list[str]:
    """The lines of the table as the last step drew it (Live redraws it in place each step)."""
    return text[text.rindex("ftis-node: last steps"):].splitlines()


def row(lines: list[str], first: str) -> list[str] | None:
    """The cells of the row whose first cell is ``first`` (columns are separated by two spaces or more)."""
    for line in lines:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == first:
            return cells
    return None


def test_table_shows_the_figures_and_the_peers():
    lines = last_drawing(render_table([record(3), record(4, eval_accuracy=0.4)]))
    assert "policy v3" in lines[0]
    assert row(lines, "3") == ["3", "0.25", "0.38", "-", "2/3/6", "25% 20%/5%", "1.02/1.98", "1%", "0.120",
                               "125", "600", "600 B", "4.0 KiB", "4"]
    assert row(lines, "4")[3] == "0.40"  # the round that evaluated
    text = "\n".join(lines)
    assert "rejected this step: 4 (hash 1, stale 3)" in text and "eval accuracy 0.400 at round 4" in text
    # each peer: groups this step, groups since the start, rejections since the start
    assert row(lines, "…" + PEER_A[-12:]) == ["…" + PEER_A[-12:], "2", "4", "3 (stale 3)"]
    assert row(lines, "…" + PEER_B[-12:]) == ["…" + PEER_B[-12:], "1", "2", "4 (hash 1, quota 1, stale 2)"]


def test_table_keeps_the_last_rows_and_marks_steps_not_taken():
    lines = last_drawing(render_table([record(n, trained=n != 9) for n in range(6, 10)], rows=2))
    assert row(lines, "7") is None and row(lines, "8") is not None
    assert row(lines, "9")[5:9] == ["no step", "-", "-", "-"]


def test_table_before_any_peer():
    lines = last_drawing(render_table([record(0, peer_reward=float("nan")) | {"peer_groups_by_peer": {}}],
                                      rejections={}))
    assert row(lines, "0")[2] == "-" and row(lines, "none yet") == ["none yet", "0", "0", "0"]


def changed(step: StepFigures, name: str) -> StepFigures:
    """``step`` with the figure ``name`` set to another value (set directly: derived figures too)."""
    copy, value = replace(step), getattr(step, name)
    if isinstance(value, bool):
        value = not value
    elif isinstance(value, int | float):
        value = value * 2 + 7
    else:
        value = [*value, "12D3KooWCharlieCharlieCharlie"]
    object.__setattr__(copy, name, value)
    return copy


def test_every_figure_marked_shown_reaches_the_terminal():
    """Changing any figure ``StepFigures`` marks ``shown`` changes what the terminal shows (the summary line
    or the table), on a step taken or on a refused one."""
    bases = [step_figures(), replace(step_figures(trained=False), refused=True)]

    def drawn(step: StepFigures) -> str:
        r = report_record(replace(report(transport=AFTER), step=step), previous=BEFORE)
        return summary_line(r) + render_table([r])

    shown = [name for name, figure in FIGURES.items() if figure.shown]
    assert {f.name for f in fields(StepFigures)} > set(shown) > {"loss", "filtered_fraction", "divergence_mean"}
    for name in shown:
        assert any(drawn(base) != drawn(changed(base, name)) for base in bases), name


def test_a_shown_figure_beyond_the_layout_follows_it_by_name(monkeypatch):
    import ftis.node.records.display as display

    monkeypatch.setattr(display, "_MORE", (("novel_fraction", Figure(shown=True, unit="fraction")),
                                           ("novel_count", Figure(shown=True, unit="count"))))
    novel = {"train_novel_fraction": 0.5, "train_novel_count": 12}
    assert "D 0.120  novel_fraction 50%  novel_count 12  gen " in summary_line(record() | novel)
    lines = last_drawing(render_table([record(3) | novel, record(4, trained=False) | novel]))
    assert row(lines, "3")[8:11] == ["0.120", "50%", "12"] and row(lines, "4")[8:11] == ["-", "-", "-"]
    assert row(lines, "round")[9:11] == ["fraction", "count"]  # the headers' second lines (their first: novel)


def test_make_display_picks_by_terminal(monkeypatch):
    lines: list[str] = []
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert isinstance(make_display("auto", lines.append), LineDisplay)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert isinstance(make_display("auto", lines.append, console=Console(file=io.StringIO())), TableDisplay)
    assert isinstance(make_display("lines", lines.append), LineDisplay)
    with pytest.raises(ValueError, match="unknown display 'fancy'"):
        make_display("fancy", lines.append)


def test_join_refuses_an_unknown_display():
    from typer.testing import CliRunner

    from ftis.node.cli import app

    result = CliRunner().invoke(app, ["join", "--display", "fancy"])
    assert result.exit_code == 2 and "metrics.display" in result.output


def test_a_shown_round_figure_beyond_the_layout_follows_it_by_name(monkeypatch):
    import ftis.node.records.display as display

    monkeypatch.setattr(display, "_MORE_ROUND", (("novel_waits", Figure(shown=True, unit="count")),))
    novel = {"novel_waits": 3}
    assert "from 2 peers  novel_waits 3  loss " in summary_line(record() | novel)
    lines = last_drawing(render_table([record(3) | novel, record(4, trained=False) | novel]))
    assert row(lines, "3")[-6] == "3" and row(lines, "4")[-6] == "3"  # before gen, train, sent, recv, rej
    assert row(lines, "round")[-6] == "waits"  # the header's second line (its first: novel)
