"""A job's goodput: the time its steps that count took, over its wall time from its first attempt's start
to its end (or now), with what each fault cost split into detection, restart and recomputed steps.

The steps are the ``log_metric(step=...)`` records (``metrics.jsonl``) of every attempt, each placed in the
attempt whose start and end hold its time. A step's time is the gap to the record before it in the same
attempt (an attempt's first step: its attempt's median gap). A step a later attempt ran again (a step at or
below the highest one an earlier attempt reached) is recomputed time, charged to the fault before it; of a
step run more than once, the last run counts as productive.

For an attempt that ended in a fault:

* **detection**: from the fault (the drill's recorded time, else the attempt's last step) to the attempt's
  recorded end;
* **restart**: from that end to the next attempt's first step, less that step's own time (requeue,
  placement, the start-up of the processes, loading the checkpoint);
* **recomputed**: the time of the steps the next attempt ran again.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ._models import parse_time, utcnow


@dataclass(frozen=True)
class AttemptLoss:
    """What one fault cost the job, in seconds (the attempt that ended and the restart after it)."""

    attempt: int  # the ended attempt's index (0: the first)
    cause: str | None
    detection_s: float | None  # fault → the attempt's end (None: no step in the attempt to date it by)
    restart_s: float | None  # the end → the next attempt's first step (None: no next step yet)
    recomputed_s: float
    steps_repeated: int
    fault_time: str | None = None  # when a drill injected the fault, if it did

    @property
    def total_s(self) -> float:
        return (self.detection_s or 0.0) + (self.restart_s or 0.0) + self.recomputed_s


@dataclass(frozen=True)
class Goodput:
    """Productive step time / wall time, and what each fault cost (``lost``)."""

    goodput: float | None  # None: no step records, or no wall time yet
    wall_s: float
    productive_s: float
    steps: int  # distinct steps done
    steps_missing: int  # steps between the first and the last that no attempt recorded (lost work)
    attempts: int
    lost: tuple[AttemptLoss, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "goodput": None if self.goodput is None else round(self.goodput, 4),
            "wallSeconds": round(self.wall_s, 1),
            "productiveSeconds": round(self.productive_s, 1),
            "steps": self.steps,
            "stepsMissing": self.steps_missing,
            "attempts": self.attempts,
            "lost": [
                {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(loss).items()}
                for loss in self.lost
            ],
        }

    def summary(self) -> str:
        """One line: ``goodput 93.1% (412 s of steps in 442 s; 2 faults cost 30 s)``."""
        if self.goodput is None:
            return "goodput unknown (no log_metric(step=...) records)"
        faults = (
            f"; {len(self.lost)} fault(s) cost {sum(x.total_s for x in self.lost):.0f} s" if self.lost else ""
        )
        return (
            f"goodput {100 * self.goodput:.1f}% ({self.productive_s:.0f} s of steps in {self.wall_s:.0f} s"
            f"{faults})"
        )


@dataclass(frozen=True)
class _Window:
    index: int
    start: float
    end: float | None
    cause: str | None


def _seconds(value: object) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    when = parse_time(value) if isinstance(value, str) else None
    return when.timestamp() if when is not None else None


def step_records(lines: Iterable[str]) -> list[tuple[int, float]]:
    """(step, time) of each ``metrics.jsonl`` line that has both, in file order (``epoch`` where a line has
    no ``step``: the shipped training modules log one line per epoch)."""
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(doc, dict):
            continue
        step, when = doc.get("step", doc.get("epoch")), doc.get("time")
        if isinstance(step, int | float) and isinstance(when, int | float) and not isinstance(step, bool):
            out.append((int(step), float(when)))
    return out


def compute(
    attempts: Sequence[Mapping[str, Any]],
    current: Mapping[str, Any] | None,
    records: Iterable[tuple[int, float]],
    *,
    end: datetime | None = None,
    faults: Mapping[int, str] | None = None,
) -> Goodput:
    """Goodput from the job's ended ``attempts`` (their records: index, start, end, cause), the attempt
    running now (``current``: index, start; None when the job ended), the step records of every attempt,
    the job's end (None: now) and the drills' fault times by attempt index."""
    windows: list[_Window] = []
    for a in attempts:
        start = _seconds(a.get("start"))
        if start is not None:
            windows.append(
                _Window(int(a.get("index", len(windows))), start, _seconds(a.get("end")), a.get("cause"))
            )
    if current is not None and _seconds(current.get("start")) is not None:
        windows.append(
            _Window(int(current.get("index", len(windows))), _seconds(current["start"]) or 0.0, None, None)
        )
    windows.sort(key=lambda w: w.start)
    finish = (end or utcnow()).timestamp()
    wall = max(0.0, finish - windows[0].start) if windows else 0.0
    per: dict[int, list[tuple[int, float]]] = {w.index: [] for w in windows}
    for step, when in sorted(set(records), key=lambda r: (r[1], r[0])):
        for w in reversed(windows):
            if when >= w.start - 1.0 and (w.end is None or when <= w.end + 1.0):
                per[w.index].append((step, when))
                break
    durations: dict[int, list[tuple[int, float]]] = {}
    for w in windows:
        recs = per[w.index]
        gaps = [b[1] - a[1] for a, b in itertools.pairwise(recs)]
        first = statistics.median(gaps) if gaps else 0.0
        durations[w.index] = (
            [(recs[0][0], first)] + [(b[0], g) for b, g in zip(recs[1:], gaps, strict=True)] if recs else []
        )
    counted: dict[int, float] = {}  # step → its last run's time
    losses: list[AttemptLoss] = []
    reached = None  # the highest step any earlier attempt reached
    for i, w in enumerate(windows):
        steps = durations[w.index]
        repeated = [(s, d) for s, d in steps if reached is not None and s <= reached]
        if i > 0 and losses:
            prev = losses[-1]
            losses[-1] = AttemptLoss(
                **{
                    **asdict(prev),
                    "restart_s": _restart(windows[i - 1], per[w.index], steps),
                    "recomputed_s": sum(d for _, d in repeated),
                    "steps_repeated": len({s for s, _ in repeated}),
                }
            )
        for s, d in steps:
            counted[s] = d
        top = max((s for s, _ in steps), default=None)
        if top is not None:
            reached = top if reached is None else max(reached, top)
        requeued = i < len(windows) - 1  # another attempt followed, whatever ended this one (a listed code)
        if w.end is not None and (requeued or w.cause not in (None, "exit", "user_terminate")):
            fault = (faults or {}).get(w.index)
            fault_s = _seconds(fault) if fault else None
            last = per[w.index][-1][1] if per[w.index] else None
            since = fault_s if fault_s is not None else last
            losses.append(
                AttemptLoss(
                    attempt=w.index,
                    cause=w.cause,
                    detection_s=None if since is None else max(0.0, w.end - since),
                    restart_s=None,
                    recomputed_s=0.0,
                    steps_repeated=0,
                    fault_time=fault,
                )
            )
    productive = sum(counted.values())
    return Goodput(
        goodput=(min(1.0, productive / wall) if counted and wall > 0 else None),
        wall_s=wall,
        productive_s=productive,
        steps=len(counted),
        steps_missing=_missing(sorted(counted)),
        attempts=len(windows),
        lost=tuple(losses),
    )


def _restart(ended: _Window, recs: list[tuple[int, float]], steps: list[tuple[int, float]]) -> float | None:
    if ended.end is None or not recs:
        return None
    return max(0.0, recs[0][1] - ended.end - (steps[0][1] if steps else 0.0))


def _missing(steps: list[int]) -> int:
    """Steps absent between the first and the last, at the records' usual spacing (1, or every N)."""
    if len(steps) < 2:
        return 0
    spacing = statistics.mode(b - a for a, b in itertools.pairwise(steps))
    return max(0, (steps[-1] - steps[0]) // max(1, spacing) + 1 - len(steps))
