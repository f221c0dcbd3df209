"""Autoscale on the head node: the scheduler grows the cluster toward its queue and lets idle nodes go
(policy in ``policy/autoscale.py``), records each decision in the cluster's event log and publishes its
size.

``AutoScaler`` owns since when each free node is idle, when the policy wants to look again, and the
release of nodes in flight; it sets which nodes are up on the ``Cluster``. It is given the cluster, the
store (which nodes jobs hold, what is queued), the health gate (unusable nodes go first) and the worker
threads.
"""

from __future__ import annotations

import concurrent.futures
import os
import time

from ..common import now, write_json_atomic
from ..policy.autoscale import NodeView, decide
from ..protocol.paths import SIZE_RECORD
from .cluster import Cluster
from .gate import NodeGate
from .log import log
from .store import Store


class AutoScaler:
    def __init__(
        self, cluster: Cluster, store: Store, gate: NodeGate, pool_exec: concurrent.futures.Executor
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.gate = gate
        self.pool_exec = pool_exec
        self.free_since: dict[str, float] = {}  # node id → since when no job holds it
        self.next_review: float | None = None  # when the policy wants to look again (None: no need)
        self.releasing: concurrent.futures.Future[None] | None = None

    def busy(self) -> bool:
        """Whether a review is pending or nodes are being released (the scheduler stays up for them)."""
        return self.next_review is not None or self.releasing is not None

    def tick(self) -> None:
        """Grow toward the queue's needs and let nodes idle past the limit go, down to min_nodes — here,
        on the head node, so that no client needs to stay up for a cluster to cost nothing when idle."""
        settings = self.cluster.settings()
        if settings is None:
            return
        if self.releasing is not None:
            if not self.releasing.done():
                return
            self.releasing = None
        t = time.time()
        held = self.store.held()
        up = self.cluster.nodes()
        for node in up:
            if node["id"] in held:
                self.free_since.pop(node["id"], None)
            else:
                self.free_since.setdefault(node["id"], t)
        pool = self.cluster.pool()
        head = pool[0]["id"] if pool else None
        bad = self.gate.unusable  # failed the health gate: the policy lets them go first and replaces them
        views = [
            NodeView(
                n["id"],
                n["id"] in held,
                self.free_since.get(n["id"], t),
                head=n["id"] == head,
                unusable=n["id"] in bad,
            )
            for n in up
        ]
        queue = [r["node_count"] for r in self.store.jobs("queued")]
        decision = decide(settings, views, queue, t)
        self.next_review = decision.next_review
        if not decision.changed:
            return
        kept = [n["id"] for n in up if n["id"] not in decision.remove]
        spare = [n["id"] for n in pool if n["id"] not in kept and n["id"] not in decision.remove]
        grown = spare[: max(0, decision.target - len(kept))]
        self.cluster.scale_to([n["id"] for n in pool if n["id"] in kept or n["id"] in grown])
        for node_id in decision.remove:
            self.free_since.pop(node_id, None)
        self.cluster.event(decision.to_dict())
        azure = self.cluster.cfg.get("azure")
        if azure and decision.remove:
            self.releasing = self.pool_exec.submit(release_azure_nodes, azure, list(decision.remove))
        self.publish_size()

    def publish_size(self) -> None:
        """The nodes up now, in the cluster's ``size.json`` on the share."""
        doc = {"nodes": [n["id"] for n in self.cluster.nodes()], "updated": now()}
        try:
            write_json_atomic(os.path.join(self.cluster.cfg["cluster_dir"], SIZE_RECORD), doc)
        except OSError as exc:
            log(f"cannot write the cluster's size yet: {exc}")


def release_azure_nodes(azure: dict[str, str], remove: list[str]) -> None:
    """Delete the named instances with the scale set's own identity (a role on that scale set only)."""
    from ..azure.capacity import AzureCapacity, ScaleSetRef

    try:
        ref = ScaleSetRef(azure["subscription"], azure["resource_group"], azure["vmss"])
        AzureCapacity(ref).delete_instances([r.rsplit("_", 1)[-1] for r in remove])
    except Exception as exc:  # the nodes are out of the queue's reach either way; say why they stay
        log(f"could not release {', '.join(remove)} through the scale set's identity: {exc}")
