"""Why each queued job waits, and until when (standard library only, no state): the scheduler publishes
it with the queue (``nodes.json``'s ``pending``), the client shows it (``job.status.pending``).

The estimated start plays the queue forward in its order (``queue.plan``'s: priority, then first come)
from the nodes free now and the running jobs' wall clock limits: each job starts once enough nodes are
free and never before the job ahead of it; a job that starts ends by its own limit. A job that waits,
directly or through the jobs ahead, for one without a limit gets no estimate (None). Times are the
limits' own, never ``now``: a record that does not change is not written again.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from ..protocol.records import (
    AHEAD_SHOWN,
    CLUSTER_AT_ZERO,
    MOUNT_UNAVAILABLE,
    NODES_DOWN,
    NODES_UNHEALTHY,
    PREPARING_NODES,
    PRIORITY,
    RESERVED,
    SCALING_UP,
    SUBMITTED,
    WAITING_FOR_NODES,
    PendingDoc,
)
from .queue import Waiting

DETAILED = 100  # the first this many queued jobs get a reason each (nodes.json stays small with 10,000)


@dataclass(frozen=True)
class Running:
    """A running (or cleaning) job as the estimate sees it."""

    key: str
    nodes: int
    ends_by: float | None  # started + its wall clock limit; None: no limit


@dataclass(frozen=True)
class NodesNow:
    """The cluster's nodes as placement sees them now."""

    up: Sequence[str]  # the nodes up
    free: Sequence[str]  # up, held by no job, not down, not kept out by the health gate
    unusable: Mapping[str, str] = field(default_factory=dict)  # failed the health gate: node -> why
    down: Sequence[str] = ()  # stopped answering
    checking: Sequence[str] = ()  # the health gate is checking them
    can_grow: int = 0  # with autoscale: nodes the cluster may still add (max_nodes - up)


@dataclass(frozen=True)
class MountWait:
    """A queued job's mounts that cannot be used on ``node`` (mount name -> why): it waits for them."""

    node: str
    missing: Mapping[str, str]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _names(keys: Sequence[str]) -> str:
    shown = ", ".join(k.rsplit("/", 1)[-1] for k in keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def estimate(order: Sequence[Waiting], running: Sequence[Running], free: int) -> dict[int, float | None]:
    """Job id -> when it starts by the running jobs' limits (0.0: it could start now; None: unknown)."""
    releases = sorted((r.ends_by if r.ends_by is not None else float("inf"), r.nodes) for r in running)
    avail, after = free, 0.0
    out: dict[int, float | None] = {}
    for job in order:
        if after == float("inf"):  # a job ahead waits for one without a limit: so does this one
            out[job.job_id] = None
            continue
        t = after
        while releases and releases[0][0] <= t:
            avail += releases.pop(0)[1]
        while avail < job.nodes and releases and releases[0][0] != float("inf"):
            t = releases[0][0]
            while releases and releases[0][0] <= t:
                avail += releases.pop(0)[1]
        if avail < job.nodes:
            after = float("inf")  # this one and every job behind it: unknown
            out[job.job_id] = None
            continue
        out[job.job_id] = t
        after = t
        avail -= job.nodes
        bisect.insort(releases, (t + job.wall if job.wall else float("inf"), job.nodes))
    return out


def explain(
    queued: Sequence[tuple[str, Waiting]],
    running: Sequence[Running],
    nodes: NodesNow,
    mounts: Mapping[str, MountWait] | None = None,
) -> dict[str, PendingDoc]:
    """Job key -> why it waits, for the first ``DETAILED`` queued jobs in the queue's order. ``mounts``:
    the jobs held back because a storage they mount cannot be used (they wait for it, not for nodes)."""
    mounts = mounts or {}
    order = sorted(queued, key=lambda kw: (-kw[1].priority, kw[1].job_id))[:DETAILED]
    starts = estimate([w for k, w in order if k not in mounts], running, len(nodes.free))
    up = set(nodes.up)
    unusable = {n: why for n, why in sorted(nodes.unusable.items()) if n in up}
    down = sorted(set(nodes.down) & up)
    checking = sorted(set(nodes.checking) & up)
    healthy = len(up) - len(set(unusable) | set(down))
    busy = sorted({r.key for r in running})
    out: dict[str, PendingDoc] = {}
    for i, (key, job) in enumerate(order):
        ahead = [k for k, _ in order[:i]]
        start = starts.get(job.job_id)
        est = _iso(start) if start else None
        base = PendingDoc(
            kind=WAITING_FOR_NODES,
            message="",
            position=i + 1,
            ahead=ahead[:AHEAD_SHOWN],
            ahead_count=len(ahead),
            estimated_start=est,
        )
        need = job.nodes
        if key in mounts:  # the scheduler does not start it until its storage is there
            wait = mounts[key]
            listed = "; ".join(f"{m}: {why}" for m, why in sorted(wait.missing.items()))
            why = f"its mount(s) cannot be used on the head node {wait.node}: {listed}"
            out[key] = _with(base, MOUNT_UNAVAILABLE, why, {wait.node: listed}, None)
            continue
        if need > healthy:  # it cannot start on the nodes there are, however long it waits
            kind, why, named = _short(need, len(up), healthy, unusable, down, nodes.can_grow)
            out[key] = _with(base, kind, why, named, None)
            continue
        later_higher = [k for k, w in order[:i] if w.priority > job.priority and w.job_id > job.job_id]
        if checking and need <= len(nodes.free) + len(checking):
            why = f"the health gate is checking {', '.join(checking)} before it can start"
            out[key] = _with(base, PREPARING_NODES, why, dict.fromkeys(checking, "health check running"), est)
        elif need <= len(nodes.free) and i == 0:
            why = f"{need} node(s) are free: it starts at the next pass"
            out[key] = _with(base, SUBMITTED, why, {}, None)
        elif later_higher:
            why = f"higher-priority job(s) that came later go first: {_names(later_higher)}"
            out[key] = _with(base, PRIORITY, why, {}, est)
        elif need <= len(nodes.free):
            first = order[0][0]
            why = (
                f"{len(nodes.free)} node(s) are free but kept for {_names([first])}, ahead of it: starting "
                "it now could delay that job (a wall clock limit that ends before it lets a job backfill)"
            )
            out[key] = _with(base, RESERVED, why, {}, est)
        else:
            held = f" by {_names(busy)}" if busy else ""
            why = f"needs {need} node(s); {len(nodes.free)} free, {len(up) - len(nodes.free)} busy{held}"
            if ahead:
                why += f"; {len(ahead)} job(s) ahead: {_names(ahead)}"
            out[key] = _with(base, WAITING_FOR_NODES, why, {}, est)
    return out


def _short(
    need: int, up: int, healthy: int, unusable: dict[str, str], down: list[str], can_grow: int
) -> tuple[str, str, dict[str, str]]:
    """Why a job that needs ``need`` nodes cannot start on the ``healthy`` of the ``up`` nodes."""
    if can_grow and up + can_grow >= need:
        return SCALING_UP, f"the cluster grows from {up} node(s) for it (it needs {need})", {}
    if up == 0:
        return CLUSTER_AT_ZERO, f"the cluster has no nodes (it needs {need}): resize it", {}
    if unusable:
        named = ", ".join(unusable)
        why = f"needs {need} node(s); {healthy} of {up} are healthy: {named} failed the health gate"
        return NODES_UNHEALTHY, why, dict(unusable)
    if down:
        why = f"needs {need} node(s); {healthy} of {up} answer: {', '.join(down)} stopped answering"
        return NODES_DOWN, why, dict.fromkeys(down, "stopped answering")
    return WAITING_FOR_NODES, f"needs {need} node(s); the cluster has {up}", {}


def _with(base: PendingDoc, kind: str, why: str, named: dict[str, str], est: str | None) -> PendingDoc:
    return PendingDoc(
        kind=kind,
        message=why,
        position=base.position,
        ahead=base.ahead,
        ahead_count=base.ahead_count,
        nodes=named,
        estimated_start=est,
    )
