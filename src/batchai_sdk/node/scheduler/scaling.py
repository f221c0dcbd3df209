"""Autoscale on the head node: the scheduler grows the cluster toward its queue and lets idle nodes go
(policy in ``autoscale.py``), records each decision in the cluster's event log and publishes its size."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ..common import now, write_json_atomic
from ..policy.autoscale import NodeView, decide
from ..protocol import SIZE_RECORD

if TYPE_CHECKING:
    from .daemon import Scheduler


def autoscale(sched: Scheduler) -> None:
    """Grow toward the queue's needs and let nodes idle past the limit go, down to min_nodes — here,
    on the head node, so that no client needs to stay up for a cluster to cost nothing when idle."""
    settings = sched.settings()
    if settings is None:
        return
    if sched.scaling is not None:
        if not sched.scaling.done():
            return
        sched.scaling = None
    t = time.time()
    held = sched.held()
    up = sched.nodes()
    for node in up:
        if node["id"] in held:
            sched.free_since.pop(node["id"], None)
        else:
            sched.free_since.setdefault(node["id"], t)
    head = sched.pool()[0]["id"] if sched.pool() else None
    bad = sched.gate.unusable  # failed the health gate: the policy lets them go first and replaces them
    views = [
        NodeView(
            n["id"],
            n["id"] in held,
            sched.free_since.get(n["id"], t),
            head=n["id"] == head,
            unusable=n["id"] in bad,
        )
        for n in up
    ]
    queue = [r["node_count"] for r in sched.rows("state = 'queued'")]
    decision = decide(settings, views, queue, t)
    sched.next_review = decision.next_review
    if not decision.changed:
        return
    kept = [n["id"] for n in up if n["id"] not in decision.remove]
    spare = [n["id"] for n in sched.pool() if n["id"] not in kept and n["id"] not in decision.remove]
    grown = spare[: max(0, decision.target - len(kept))]
    sched.active = [n["id"] for n in sched.pool() if n["id"] in kept or n["id"] in grown]
    for node_id in decision.remove:
        sched.free_since.pop(node_id, None)
    sched.cluster.event(decision.to_dict())
    azure = sched.cfg.get("azure")
    if azure and decision.remove:
        sched.scaling = sched.pool_exec.submit(release_azure_nodes, sched, azure, list(decision.remove))
    publish_size(sched)


def release_azure_nodes(sched: Scheduler, azure: dict[str, str], remove: list[str]) -> None:
    """Delete the named instances with the scale set's own identity (a role on that scale set only)."""
    from ..azure.capacity import AzureCapacity, ScaleSetRef

    try:
        ref = ScaleSetRef(azure["subscription"], azure["resource_group"], azure["vmss"])
        AzureCapacity(ref).delete_instances([r.rsplit("_", 1)[-1] for r in remove])
    except Exception as exc:  # the nodes are out of the queue's reach either way; say why they stay
        sched.log(f"could not release {', '.join(remove)} through the scale set's identity: {exc}")


def publish_size(sched: Scheduler) -> None:
    """The nodes up now, in the cluster's ``size.json`` on the share."""
    doc = {"nodes": [n["id"] for n in sched.nodes()], "updated": now()}
    try:
        write_json_atomic(os.path.join(sched.cfg["cluster_dir"], SIZE_RECORD), doc)
    except OSError as exc:
        sched.log(f"cannot write the cluster's size yet: {exc}")
