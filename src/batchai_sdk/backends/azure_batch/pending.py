"""Why a job's Batch task is still active (queued), from its pool's states — the only place this is read:
the pool's resize errors (a core quota), its allocation state (resizing), its target, and its nodes'
states (starting, waiting for the start task, unusable). Kinds as in ``node/protocol/records.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...node.protocol.records import (
    CLUSTER_AT_ZERO,
    NODES_UNHEALTHY,
    OTHER,
    PREPARING_NODES,
    QUOTA,
    SCALING_UP,
    WAITING_FOR_NODES,
    PendingDoc,
)

_PREPARING = {"creating", "starting", "waitingforstarttask", "rebooting", "reimaging"}
_UNHEALTHY = {"unusable", "starttaskfailed", "unknown", "offline"}
_GONE = {"leavingpool", "preempted", "deallocated", "deallocating"}


def pending_reason(
    pool: Mapping[str, Any] | None, nodes: Sequence[Mapping[str, Any]], need: int
) -> PendingDoc:
    """Why a task that needs ``need`` nodes of ``pool`` (the service's pool object and its nodes) waits."""
    if pool is None:
        why = "its pool is gone: create the cluster again"
        return PendingDoc(kind=OTHER, message=why, source="PoolNotFound")
    errors = [e for e in pool.get("resizeErrors") or [] if isinstance(e, Mapping)]
    for error in errors:
        code = str(error.get("code") or "")
        if "Quota" in code:
            why = f"the pool cannot grow: {code}: {error.get('message') or 'a core quota is reached'}"
            return PendingDoc(kind=QUOTA, message=why, source=code)
    states = {str(n.get("id")): str(n.get("state") or "").lower() for n in nodes}
    live = {n: s for n, s in states.items() if s not in _GONE}
    idle = [n for n, s in live.items() if s == "idle"]
    preparing = {n: s for n, s in live.items() if s in _PREPARING}
    unhealthy = {n: s for n, s in live.items() if s in _UNHEALTHY}
    target = int(pool.get("targetDedicatedNodes") or 0) + int(pool.get("targetLowPriorityNodes") or 0)
    resizing = str(pool.get("allocationState") or "").lower() == "resizing"
    if len(live) < need and (resizing or target > len(live)):
        why = f"the pool grows from {len(live)} to {target} node(s) for it (it needs {need})"
        return PendingDoc(kind=SCALING_UP, message=why, source=str(pool.get("allocationState") or ""))
    if not live:
        if pool.get("enableAutoScale"):
            why = "the pool has no nodes; its autoscale formula grows it at its next evaluation"
            return PendingDoc(kind=SCALING_UP, message=why, source="autoscale")
        return PendingDoc(kind=CLUSTER_AT_ZERO, message=f"the pool has no nodes (it needs {need}): resize it")
    if preparing and len(idle) + len(preparing) >= need:
        why = f"its nodes are being prepared: {', '.join(f'{n} {s}' for n, s in sorted(preparing.items()))}"
        return PendingDoc(kind=PREPARING_NODES, message=why, nodes=preparing)
    if unhealthy and len(live) - len(unhealthy) < need:
        named = ", ".join(f"{n} {s}" for n, s in sorted(unhealthy.items()))
        why = f"needs {need} node(s); {len(live) - len(unhealthy)} of {len(live)} are usable: {named}"
        return PendingDoc(kind=NODES_UNHEALTHY, message=why, nodes=unhealthy)
    if errors:
        code = str(errors[0].get("code") or "")
        return PendingDoc(kind=OTHER, message=f"the pool cannot resize: {code}", source=code)
    why = f"needs {need} node(s); {len(idle)} of {len(live)} idle"
    return PendingDoc(kind=WAITING_FOR_NODES, message=why)
