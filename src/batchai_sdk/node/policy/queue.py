"""The queue's order: which waiting jobs start now (standard library only, no state).

Higher ``schedulingPriority`` first (Batch AI's low, normal, high), then first come, first served. A later
job may start earlier (backfill) only when it cannot delay the first
waiting job: it fits on nodes free now and either ends (by its wall clock limit) before the earliest time
the first waiting job can start, or uses only nodes that job will not need then.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.names import PRIORITIES as PRIORITIES  # names.py spells them once


def priority_rank(name: object) -> int:
    """The queue rank of a ``schedulingPriority`` name; anything else (older records) is normal."""
    return PRIORITIES.get(str(name).lower(), 0) if name is not None else 0


@dataclass(frozen=True)
class Waiting:
    """A queued job, as placement sees it."""

    job_id: int  # ids grow with submission: the lower, the earlier it came
    nodes: int
    wall: float | None  # the job's wall clock limit in seconds, if it has one
    priority: int = 0  # priority_rank of its schedulingPriority


@dataclass(frozen=True)
class Holding:
    """A running (or cleaning) job's nodes, held until it ends."""

    nodes: int
    ends_by: float | None  # when its wall clock limit ends it at the latest; None: unknown


def plan(queued: list[Waiting], running: list[Holding], free: int, now: float) -> list[tuple[int, int]]:
    """Which queued jobs start now, in queue order: (job id, node count).

    The queue's order: higher priority first, then first come. Jobs start in that order while they fit.
    The first job that does not fit gets a reservation — the earliest time enough nodes are free for it,
    from the running jobs' wall clock limits (never, if one has none) — and how many nodes are spare then.
    A later job may start before it (backfill) only if it fits now and either ends by its own wall clock
    limit before that time, or needs no more than the spare nodes: either way the first job starts no
    later than it would have.
    """
    starts: list[tuple[int, int]] = []
    shadow: float | None = None
    extra = 0
    ends = sorted((h.ends_by if h.ends_by is not None else float("inf"), h.nodes) for h in running)
    for job in sorted(queued, key=lambda w: (-w.priority, w.job_id)):
        if shadow is None:
            if job.nodes <= free:
                starts.append((job.job_id, job.nodes))
                free -= job.nodes
                ends = sorted([*ends, (now + job.wall if job.wall else float("inf"), job.nodes)])
                continue
            shadow, extra = float("inf"), 0
            avail = free
            for end, count in ends:
                avail += count
                if avail >= job.nodes:
                    shadow, extra = end, avail - job.nodes
                    break
            continue
        if job.nodes > free:
            continue
        finish = now + job.wall if job.wall else float("inf")
        before = finish <= shadow and finish != float("inf")
        if before or job.nodes <= extra:
            if not before:
                extra -= job.nodes
            starts.append((job.job_id, job.nodes))
            free -= job.nodes
    return starts
