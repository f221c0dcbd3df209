"""A running job's progress, as the hang watchdog sees it (standard library only).

Progress is the job's steps where it reports them: the records of ``metrics.jsonl`` in its logs folder
(``log_metric(step=...)`` writes them there; a record's ``step``, else its ``epoch``). A job that reports
none progresses when it writes output (``stdout.txt``, ``stderr.txt``, ``execution-<node>.log``), except
what only says that it does not: a framework's stall warnings (Horovod's "One or more tensors were
submitted to be reduced...", NCCL's and Gloo's watchdog and timeout lines), the SDK's own hang lines and
the stacks faulthandler writes when the watchdog asks for them.

Once a job has reported two steps, it is stuck after ``max(STEP_FACTOR × its median step interval,
STEP_FLOOR)`` seconds without a new one; before that (and for a job that reports none) after ``hang_notice``
seconds without output. A ``hang_notice`` below ``STEP_FLOOR`` lowers the floor to it (tests and tuning:
``hang_notice=5`` notices a stuck stepping job within ``max(3 × median, 5 s)``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

from .watchdog import job_log_files

__all__ = [
    "OWN_PREFIX",
    "STEP_FACTOR",
    "STEP_FLOOR",
    "ProgressTracker",
    "is_stall_warning",
    "step_limit",
]

STEP_FACTOR = 3.0
STEP_FLOOR = 60.0
OWN_PREFIX = "[batchai] "  # the SDK's own lines in a job's output (the hang verdict): never progress
_READ_CAP = 256 * 1024  # of what a file added since the last look, only the end is read
_STALL = re.compile(
    "|".join(
        (
            r"One or more tensors were submitted to be",  # Horovod's stall inspector, every 60 s
            r"stall_inspector",
            r"Missing ranks:",
            r"^\s*\d+: \[[^\]]*\]\s*$",  # Horovod's list under "Missing ranks:"
            r"Watchdog caught collective operation timeout",  # NCCL's watchdog
            r"ProcessGroupNCCL.*(?:[Ww]atchdog|[Hh]eartbeat)",
            r"\[Gloo\].*[Tt]imed? ?out",
            r"^" + re.escape(OWN_PREFIX),
            # the stacks faulthandler writes when the watchdog sends SIGUSR1 (a traceback has "line N, in")
            r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):",
            r'^\s*File ".*", line \d+ in ',
        )
    ),
    re.MULTILINE,
)


def is_stall_warning(text: str) -> bool:
    """Whether ``text`` (what a job wrote since the last look) holds a stall warning or the SDK's own line:
    such a write is evidence of a hang, never progress."""
    return bool(_STALL.search(text))


def step_limit(intervals: list[float], hang_notice: float | None) -> float | None:
    """Seconds without a new step after which a stepping job is stuck: ``max(3 × median, 60 s)`` (the floor
    lowered to ``hang_notice`` where that is smaller); None when the notice is off or no interval is known."""
    if not hang_notice or not intervals:
        return None
    return max(STEP_FACTOR * statistics.median(intervals), min(STEP_FLOOR, hang_notice))


class ProgressTracker:
    """When, on the caller's clock, the job last made progress: a new step, else output that is not a stall
    warning. ``observe(folder, now)`` every few seconds; reads only what the files added since."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int]] = {}
        self.last_output: float | None = None
        self.last_step_at: float | None = None
        self.step: float | None = None  # the last step (or epoch) the job reported
        self.intervals: list[float] = []  # seconds between consecutive steps (the job's clock)
        self._step_time: float | None = None
        self._metrics_offset = 0
        self._partial = b""
        self._observed_at: float | None = None  # the previous look (a new step came after it)

    @property
    def stepping(self) -> bool:
        """Whether the steps rule is in force (two steps seen)."""
        return bool(self.intervals)

    @property
    def last_progress(self) -> float | None:
        return self.last_step_at if self.stepping else self.last_output

    def limit(self, hang_notice: float | None) -> float | None:
        """Seconds without progress before the job is stuck (the notice's limit); None: off."""
        if not hang_notice:
            return None
        return step_limit(self.intervals, hang_notice) if self.stepping else hang_notice

    def observe(self, folder: str | os.PathLike[str], now: float) -> float | None:
        """Look at the job's logs folder at time ``now``; returns ``last_progress``."""
        for path in job_log_files(folder):
            self._look(path, now)
        self._read_steps(Path(folder) / "metrics.jsonl", now)
        self._observed_at = now
        return self.last_progress

    def _look(self, path: Path, now: float) -> None:
        key = os.fspath(path)
        try:
            st = os.stat(key)
        except OSError:
            return
        signature = (st.st_size, st.st_mtime_ns)
        before = self._seen.get(key)
        self._seen[key] = signature
        if st.st_size == 0 or before == signature:
            return
        start = before[0] if before and before[0] <= st.st_size else 0
        start = max(start, st.st_size - _READ_CAP)
        try:
            with open(key, "rb") as f:
                f.seek(start)
                added = f.read(st.st_size - start).decode(errors="replace")
        except OSError:
            added = ""
        if added.strip() and is_stall_warning(added):
            return
        self.last_output = now

    def _read_steps(self, path: Path, now: float) -> None:
        try:
            size = path.stat().st_size
        except OSError:
            return
        if size < self._metrics_offset:  # cut back (a restart from a checkpoint): count afresh
            self._metrics_offset, self._partial = 0, b""
            self.step, self._step_time = None, None
        if size == self._metrics_offset:
            return
        try:
            with open(path, "rb") as f:
                f.seek(self._metrics_offset)
                data = f.read(size - self._metrics_offset)
        except OSError:
            return
        self._metrics_offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # a line still being written
        for line in lines:
            self._record(line, now)

    def _record(self, line: bytes, now: float) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        step = record.get("step", record.get("epoch"))
        if isinstance(step, bool) or not isinstance(step, int | float) or step == self.step:
            return
        at = record.get("time")
        at = float(at) if isinstance(at, int | float) and not isinstance(at, bool) else now
        if self.step is not None and self._step_time is not None and at >= self._step_time:
            self.intervals.append(at - self._step_time)
            del self.intervals[:-1000]
        # when the step came, on the caller's clock: the record's own time, kept between the previous look
        # and this one (a look a second apart would otherwise date it up to a second late; a node's clock
        # that is off moves it no further than that)
        seen = now if self._observed_at is None else min(now, max(self._observed_at, at))
        self.step, self._step_time, self.last_step_at = step, at, seen
