"""Hang detection from a job's log files: pure functions and one small tracker (standard library only).

A job counts as hung when no rank has written anything to the job's logs (``stdout.txt``, ``stderr.txt``,
``execution-<node>.log``) for ``hang_timeout`` seconds. Observe mode (``hang_notice`` seconds, on by default)
uses the same verdict with its own limit: the stacks are collected and the status says ``hang_notice(...)``
while the job goes on. The scheduler calls, every few seconds::

    last = tracker.observe(stdouterr_dir, now)   # progress.ProgressTracker: steps, else output
    if hang_verdict(last, started, now, hang_timeout) is not None:
        files = [collect_stacks(...) on every node of the job]      # node/job/stacks.py
        reason = hang_verdict(last, started, now, hang_timeout, stack_files=files)
        # end the job failed with ``reason``, free its nodes

``last_output_time`` reads modification times: simple, but on a network share the times come from the file
server's clock and may lag. ``progress.ProgressTracker`` instead notes, on the caller's clock, when a file
grew or changed (stall warnings aside) or a new step was logged, which is immune to clock skew between the
share and the scheduler.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "LOG_PATTERNS",
    "hang_notice",
    "hang_reason",
    "hang_verdict",
    "job_log_files",
    "last_output_time",
    "verdict_of",
]

LOG_PATTERNS = ("stdout.txt", "stderr.txt", "execution-*.log")


def job_log_files(stdouterr_dir: str | os.PathLike[str]) -> list[Path]:
    """The files of ``stdouterr_dir`` whose growth counts as output (``LOG_PATTERNS``), sorted."""
    folder = os.fspath(stdouterr_dir)
    found: set[str] = set()
    for pattern in LOG_PATTERNS:
        found.update(glob.glob(os.path.join(glob.escape(folder), pattern)))
    return sorted(Path(p) for p in found)


def last_output_time(paths: Iterable[str | os.PathLike[str]]) -> float | None:
    """The latest modification time (epoch seconds) of the non-empty files among ``paths``.

    Missing and empty files are ignored (an empty file was created, not written to); None when there is
    no output at all.
    """
    latest: float | None = None
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_size > 0 and (latest is None or st.st_mtime > latest):
            latest = st.st_mtime
    return latest


VERDICT_MARK = "possibly hung — "  # a notice's verdict runs from here to the next " — "


def hang_reason(
    silent_seconds: float, stack_files: Sequence[str] = (), *, verdict: str | None = None, steps: bool = False
) -> str:
    """``no output for N s (possible hang); stacks in <files>`` — the failure reason of a hung job; with
    the cross-rank ``verdict`` first: ``<verdict> — no new step for N s (possible hang); stacks in ...``."""
    where = ", ".join(stack_files) if stack_files else "none (no stack files could be written)"
    what = "no new step" if steps else "no output"
    first = f"{verdict} — " if verdict else ""
    return f"{first}{what} for {int(silent_seconds)} s (possible hang); stacks in {where}"


def hang_notice(
    silent_seconds: float,
    stack_files: Sequence[str] = (),
    hang_timeout: float | None = None,
    *,
    verdict: str | None = None,
    steps: bool = False,
) -> str:
    """Observe mode's note in a running job's status: ``no output for 10 min, possibly hung: stacks in
    <files>``, then what happens next (nothing, or the end at ``hang_timeout``). With the cross-rank
    ``verdict``: ``possibly hung — <verdict> — no new step for 1 min 5 s; stacks in <files>; ...``."""
    where = ", ".join(stack_files) if stack_files else "none (no stack files could be written)"
    what = "no new step" if steps else "no output"
    then = (
        f"it is failed after {_span(hang_timeout)} of silence (hang_timeout)"
        if hang_timeout
        else "the job goes on; set hang_timeout to fail a job silent that long"
    )
    if verdict:
        return f"{VERDICT_MARK}{verdict} — {what} for {_span(silent_seconds)}; stacks in {where}; {then}"
    return f"{what} for {_span(silent_seconds)}, possibly hung: stacks in {where}; {then}"


def verdict_of(notice: str | None) -> str | None:
    """The cross-rank verdict a notice holds (``hang_notice(verdict=...)``), or None."""
    if not notice or not notice.startswith(VERDICT_MARK):
        return None
    return notice[len(VERDICT_MARK) :].split(" — ", 1)[0] or None


def _span(seconds: float) -> str:
    """``45 s``, ``10 min``, ``12 min 5 s``, ``2 h 3 min``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def hang_verdict(
    last_output: float | None,
    started: float,
    now: float,
    hang_timeout: float | None,
    *,
    stack_files: Sequence[str] = (),
) -> str | None:
    """The hang reason if the job has been silent for at least ``hang_timeout`` seconds, else None.

    Silence is counted from the later of ``last_output`` and ``started`` (the attempt's start: a job that
    has written nothing yet gets the full timeout too). ``hang_timeout`` None or <= 0 means no watchdog.
    """
    if hang_timeout is None or hang_timeout <= 0:
        return None
    since = started if last_output is None else max(last_output, started)
    silent = now - since
    if silent < hang_timeout:
        return None
    return hang_reason(silent, stack_files)
