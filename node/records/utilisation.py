"""Where a node's wall time goes: how much of it is generating or training.

    watch = Stopwatch()                 # inside a round (``Node.run_round``)
    with watch.part("generate"): ...    # RoundReport.seconds = watch.seconds

    clock = LoopClock()                 # the join loop (``join.run_node``)
    with clock.part("checkpoint"): ...  # work of the loop itself between rounds: checkpoints, metrics
    lap = clock.lap(report.seconds)     # once per round: closes this round's share of the wall time
    lap.record()                        # loop_seconds, utilisation, loop_<part>_seconds

Each lap runs from the previous lap to this one, so the laps tile the run's wall time with nothing counted
twice and nothing left out (but the final evaluation and checkpoint, after the last lap). A round's record
is written before its bookkeeping ends, so writing it (``metrics``) and a checkpoint after it
(``checkpoint``) fall into the next round's lap.

``utilisation`` = (generate + train) / loop wall time. Periodic evaluation and checkpoints are real work
the user asked for, but neither generating nor training: they count as *not* utilised here, and their
seconds are reported on their own (``loop_eval_seconds``, ``loop_checkpoint_seconds``), so that
``work_share(..., excluding=("eval", "checkpoint"))`` gives the figure without them.
"""

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

WORK = ("generate", "train")  # what counts as utilised
ROUND_PARTS = (
    "generate",  # the generator's sampling call (vLLM: with its weight sync)
    "build",  # the round's prompts, own completions' texts, the batch and its training groups (with the run
    # loop's runner/helper_threads.py: also taking peers' batches and waiting for their texts: Intake.take_early)
    "publish",  # encoding the own batch and handing it to the network thread (runner/helper_threads.py: to the
    # publisher's thread, and waiting for it after the step)
    "eval",  # periodic held-out evaluation, when due (after the publish: Node.run_round)
    "score_own",  # this node's task scoring its own completions (inside build's span, counted apart)
    "collect",  # taking peers' batches that arrived; rounds mode: waiting for the rest
    "score_peers",  # decoding peers' completions (unless decoded ahead) and scoring them with this node's task
    "select",  # the fair peer-group mix (and horizontal merging)
    "train",  # the F-TIS optimizer step
)
LOOP_PARTS = (
    "checkpoint",  # checkpoints and exports between rounds
    "metrics",  # writing the step record: metrics.jsonl, TensorBoard, the display
)
OTHER = "other"  # the rest of the lap: the round's report, the loop's own steps
PARTS = (*ROUND_PARTS, *LOOP_PARTS, OTHER)


class Stopwatch:
    """Wall seconds per named part, summed over every time the part ran."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self.seconds: dict[str, float] = {}

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self._clock() - started


@dataclass(frozen=True)
class LoopLap:
    seconds: float  # wall time from the previous lap to this one
    parts: dict[str, float] = field(default_factory=dict)  # every name in PARTS; ``other`` is the rest

    @property
    def utilisation(self) -> float:
        return work_share([self])

    def record(self) -> dict[str, float]:
        """The figures a step record carries (``metrics.jsonl``, TensorBoard ``loop/*``)."""
        return {"loop_seconds": self.seconds, "utilisation": self.utilisation,
                **{f"loop_{name}_seconds": self.parts[name] for name in PARTS}}

    def figures(self) -> dict[str, object]:
        """The same, as ``RoundReport``'s fields (``loop_seconds``, ``utilisation``, ``loop_parts``)."""
        return {"loop_seconds": self.seconds, "utilisation": self.utilisation,
                "loop_parts": {f"{name}_seconds": self.parts[name] for name in PARTS}}


def make_lap(seconds: float, parts: Mapping[str, float]) -> LoopLap:
    """A lap of ``seconds`` wall time whose measured ``parts`` are named in PARTS; the unmeasured rest is
    ``other`` (never below 0: the parts are measured inside the lap, so they cannot exceed it but by rounding)."""
    unknown = set(parts) - set(PARTS[:-1])
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS[:-1])}")
    measured = {name: float(parts.get(name, 0.0)) for name in PARTS[:-1]}
    return LoopLap(seconds, {**measured, OTHER: max(0.0, seconds - sum(measured.values()))})


class LoopClock:
    """The join loop's laps: one per round, covering all the loop's time since the previous one."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._watch = Stopwatch(clock)
        self._last = clock()

    def part(self, name: str):
        """Time the loop's own work (``checkpoint``, ``metrics``); it lands in the next lap."""
        return self._watch.part(name)

    def lap(self, round_seconds: Mapping[str, float]) -> LoopLap:
        """Close the lap now, with the round's own parts (``RoundReport.seconds``)."""
        now = self._clock()
        parts = dict(round_seconds)
        for name, seconds in self._watch.seconds.items():
            parts[name] = parts.get(name, 0.0) + seconds
        self._watch.seconds.clear()
        lap, self._last = make_lap(now - self._last, parts), now
        return lap


def work_share(laps: Iterable[LoopLap], excluding: Sequence[str] = ()) -> float:
    """Generating and training seconds over wall seconds, summed over ``laps`` (a run's utilisation), with
    the parts in ``excluding`` taken out of the wall time (e.g. evaluation). 0 for no time at all."""
    laps = list(laps)
    wall = sum(lap.seconds - sum(lap.parts.get(name, 0.0) for name in excluding) for lap in laps)
    work = sum(lap.parts.get(name, 0.0) for lap in laps for name in WORK)
    return min(1.0, work / wall) if wall > 0 else 0.0


def laps_of(records: Iterable[Mapping[str, object]]) -> list[LoopLap]:
    """The laps step records carry (records without them, e.g. from an older node, are skipped)."""
    return [LoopLap(float(r["loop_seconds"]), {name: float(r.get(f"loop_{name}_seconds") or 0.0) for name in PARTS})
            for r in records if r.get("loop_seconds") is not None]
