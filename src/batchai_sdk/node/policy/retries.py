"""Retry policy, attempt records and where each attempt's logs go (pure functions; standard library only).

Policy (``decide``), for an attempt that has ended:

=====================  ====================================================================================
how it ended           outcome
=====================  ====================================================================================
exit code 0            ``succeeded``
exit code in           ``requeue`` while retries remain (counts against ``max_retries``), else ``failed``
retry_on_exit_codes
other exit code        ``failed``
node lost              ``requeue`` while retries remain (counts against ``max_retries``), else ``failed``:
                       a crashed node and a killed one look the same, so it is spent from the user's budget
evicted                ``requeue`` without spending ``max_retries`` (the platform took the node, after a
                       notice the job used to checkpoint), up to ``MAX_EVICTION_REQUEUES`` in a row
user terminate         ``terminated``, never requeued
wall clock             ``failed`` (max_wall_clock_time is best counted over the running time of all attempts)
hang                   ``failed`` (a hang tends to repeat; the watchdog saves the stacks instead)
=====================  ====================================================================================

A job out of retries fails with the last attempt's reason plus ``(after N attempts)``.

Attempt logs: the current attempt always writes to ``stdouterr/`` itself (stdout.txt, stderr.txt,
execution-<node>.log, stacks-<node>.txt, the job-preparation logs), so ``job.stream("stdout.txt")`` follows
the attempt that is running. When an attempt ends and the job is requeued, the scheduler moves that attempt's
files into ``stdouterr/attempt-<n>/`` (``n`` 1-based: the first attempt's files end up in ``attempt-1/``)
with ``archive_attempt_logs`` before the next attempt starts; no process of the job is alive then, so no
file is moved while being written. A job that ran once keeps the old layout exactly.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_EVICTION_REQUEUES",
    "RESTART_COUNT_VARIABLE",
    "Attempt",
    "Decision",
    "EndCause",
    "Outcome",
    "RetryPolicy",
    "archive_attempt_logs",
    "attempt_dirs",
    "attempt_log_dir",
    "decide",
    "restart_environment",
]

RESTART_COUNT_VARIABLE = "AZ_BATCHAI_JOB_RESTART_COUNT"
MAX_EVICTION_REQUEUES = 20
ATTEMPT_DIR_RE = re.compile(r"^attempt-(\d+)$")


class EndCause(str, enum.Enum):
    """Why an attempt ended."""

    EXIT = "exit"  # every rank ended (mpirun's exit code is the attempt's)
    NODE_LOST = "node_lost"  # a node stopped answering, or the launcher died with it
    EVICTED = "evicted"  # a Spot / low-priority eviction notice, or simulate_eviction
    USER_TERMINATE = "user_terminate"  # job.terminate()
    WALL_CLOCK = "wall_clock"  # max_wall_clock_time reached
    HANG = "hang"  # the watchdog found no output for hang_timeout seconds

    def __str__(self) -> str:
        return self.value


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"
    REQUEUE = "requeue"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RetryPolicy:
    """``max_retries`` attempts after the first; ``retry_on_exit_codes`` that count as retryable."""

    max_retries: int = 0
    retry_on_exit_codes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        codes = tuple(self.retry_on_exit_codes)
        for code in codes:
            if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
                raise ValueError(f"retry_on_exit_codes must hold exit codes 1..255, got {code!r}")
        object.__setattr__(self, "retry_on_exit_codes", codes)


@dataclass(frozen=True)
class Decision:
    """What to do with the job after an attempt: ``outcome`` and the reason text (None on success)."""

    outcome: Outcome
    reason: str | None

    @property
    def requeue(self) -> bool:
        return self.outcome is Outcome.REQUEUE


@dataclass(frozen=True)
class Attempt:
    """One run of a job: what the scheduler records and ``job.attempts`` / ``batchai job show`` list.

    ``index`` is 0-based (it is the ``AZ_BATCHAI_JOB_RESTART_COUNT`` the attempt ran with); ``start`` and
    ``end`` are ISO 8601 UTC strings; ``log_dir`` is the attempt's folder relative to the job's stdouterr/
    ("" while its files are still at the top; ``attempt-<index+1>`` once archived).
    """

    index: int
    start: str
    nodes: tuple[str, ...] = ()
    end: str | None = None
    cause: EndCause | None = None
    exit_code: int | None = None
    reason: str | None = None
    log_dir: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. the eviction notice

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": self.start,
            "end": self.end,
            "nodes": list(self.nodes),
            "cause": self.cause.value if self.cause else None,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "log_dir": self.log_dir,
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        cause = data.get("cause")
        return cls(
            index=int(data["index"]),
            start=str(data["start"]),
            end=data.get("end"),
            nodes=tuple(data.get("nodes") or ()),
            cause=EndCause(cause) if cause else None,
            exit_code=data.get("exit_code"),
            reason=data.get("reason"),
            log_dir=str(data.get("log_dir") or ""),
            extra=dict(data.get("extra") or {}),
        )


def _evictions_in_a_row(history: Sequence[Attempt]) -> int:
    count = 0
    for attempt in reversed(history):
        if attempt.cause is not EndCause.EVICTED:
            break
        count += 1
    return count


def _retries_used(history: Sequence[Attempt]) -> int:
    """Earlier requeues that spent the user's budget: every attempt that did not end by eviction."""
    return sum(1 for a in history if a.cause is not EndCause.EVICTED)


def decide(
    policy: RetryPolicy,
    cause: EndCause,
    *,
    exit_code: int | None = None,
    detail: str | None = None,
    history: Sequence[Attempt] = (),
) -> Decision:
    """The job's next step after an attempt ended by ``cause``.

    ``history``: the attempts that ended before this one (all requeued). ``detail`` is the scheduler's own
    text for this ending (the culprit rank, the lost node, the eviction event, the hang reason); it starts
    the reason. ``exit_code`` is the attempt's (for ``EndCause.EXIT``).
    """
    attempt_no = len(history) + 1
    if cause is EndCause.EXIT:
        if exit_code is None:
            raise ValueError("decide(EndCause.EXIT) needs the exit_code")
        if exit_code == 0:
            return Decision(Outcome.SUCCEEDED, None)
        base = detail or f"exit code {exit_code}"
        if exit_code not in policy.retry_on_exit_codes:
            return Decision(Outcome.FAILED, _with_attempts(base, attempt_no))
        return _spend_retry(policy, base, history, f"exit code {exit_code} is in retry_on_exit_codes")
    if cause is EndCause.NODE_LOST:
        return _spend_retry(policy, detail or "a node of the job was lost", history, "node lost")
    if cause is EndCause.EVICTED:
        base = detail or "a node of the job was evicted"
        in_a_row = _evictions_in_a_row(history) + 1
        if in_a_row > MAX_EVICTION_REQUEUES:
            return Decision(
                Outcome.FAILED,
                f"{base} ({in_a_row} evictions in a row; requeued at most {MAX_EVICTION_REQUEUES})",
            )
        return Decision(Outcome.REQUEUE, f"{base}; requeued (evictions do not count against max_retries)")
    if cause is EndCause.USER_TERMINATE:
        return Decision(Outcome.TERMINATED, detail or "terminated by the user")
    if cause is EndCause.WALL_CLOCK:
        return Decision(Outcome.FAILED, _with_attempts(detail or "max_wall_clock_time reached", attempt_no))
    return Decision(Outcome.FAILED, _with_attempts(detail or "no output (possible hang)", attempt_no))


def _with_attempts(reason: str, attempts: int) -> str:
    return reason if attempts == 1 else f"{reason} (after {attempts} attempts)"


def _spend_retry(policy: RetryPolicy, base: str, history: Sequence[Attempt], why: str) -> Decision:
    used = _retries_used(history)
    if used < policy.max_retries:
        return Decision(
            Outcome.REQUEUE, f"{base}; requeued ({why}), retry {used + 1} of {policy.max_retries}"
        )
    if policy.max_retries == 0:
        return Decision(Outcome.FAILED, _with_attempts(base, len(history) + 1))
    return Decision(
        Outcome.FAILED,
        f"{base} (out of retries: max_retries={policy.max_retries}, after {len(history) + 1} attempts)",
    )


def restart_environment(attempt_index: int) -> dict[str, str]:
    """The variables an attempt's ranks get: ``AZ_BATCHAI_JOB_RESTART_COUNT`` (0 for the first attempt)."""
    if attempt_index < 0:
        raise ValueError(f"attempt index must be >= 0, got {attempt_index}")
    return {RESTART_COUNT_VARIABLE: str(attempt_index)}


def attempt_log_dir(stdouterr_dir: str | os.PathLike[str], attempt_index: int) -> str:
    """``<stdouterr>/attempt-<index+1>``: where attempt ``attempt_index``'s files go once it has ended."""
    if attempt_index < 0:
        raise ValueError(f"attempt index must be >= 0, got {attempt_index}")
    return os.path.join(os.fspath(stdouterr_dir), f"attempt-{attempt_index + 1}")


def archive_attempt_logs(stdouterr_dir: str | os.PathLike[str], attempt_index: int) -> list[str]:
    """Move the files at the top of ``stdouterr_dir`` into ``attempt-<index+1>/``; returns their names.

    Call it after every process of the attempt has ended and before the next attempt starts. Only plain
    files move (folders, such as earlier ``attempt-*`` ones, stay); symbolic links a job planted are moved
    as links, never followed. Refuses to overwrite an archive that already exists (an attempt archived
    twice is a scheduler bug, and its logs must not be lost).
    """
    top = os.fspath(stdouterr_dir)
    target = attempt_log_dir(top, attempt_index)
    os.makedirs(target, exist_ok=False)
    moved = []
    for entry in sorted(os.scandir(top), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            continue
        os.replace(entry.path, os.path.join(target, entry.name))
        moved.append(entry.name)
    return moved


def attempt_dirs(stdouterr_dir: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(attempt index, folder) of the archived attempts in ``stdouterr_dir``, oldest first."""
    top = os.fspath(stdouterr_dir)
    found = []
    try:
        names: Iterable[str] = os.listdir(top)
    except FileNotFoundError:
        return []
    for name in names:
        match = ATTEMPT_DIR_RE.match(name)
        if match and os.path.isdir(os.path.join(top, name)):
            found.append((int(match.group(1)) - 1, os.path.join(top, name)))
    return sorted(found)
