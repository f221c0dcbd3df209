"""A cluster: a named set of nodes of one VM size. Thin — the backend owns the machines."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from . import _progress
from ._models import (
    ClusterSpec,
    ClusterState,
    NodeCounts,
    NodeState,
    count_nodes,
    validate_node_target,
)
from .backends.base import ClusterStatus
from .exceptions import BatchAITimeoutError, ClusterBusyError, NotFoundError

if TYPE_CHECKING:
    from .job import Job
    from .pricing import Price
    from .workspace import Workspace


class Cluster:
    """Handle on a cluster; every property reads the current state (nothing is cached but the spec)."""

    def __init__(self, workspace: Workspace, spec: ClusterSpec) -> None:
        self.workspace = workspace
        self._spec = spec

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def spec(self) -> ClusterSpec:
        return self._spec

    @property
    def vm_size(self) -> str:
        return self._spec.vm_size

    @property
    def vm_priority(self) -> str:
        return self._spec.vm_priority.value

    @property
    def target_nodes(self) -> int:
        return self._spec.nodes

    @property
    def price_per_hour(self) -> Price | None:
        """Per node-hour: the user's ``price_per_hour``, else 0 on local/SSH, the Azure Retail Prices
        API's on Azure; None when unknown (see cost.py)."""
        from .cost import price_of_cluster

        return price_of_cluster(self)

    def refresh(self) -> Cluster:
        data = self.workspace.share.read_json_or_none(layout.cluster_record(self.name))
        if data is None:
            raise NotFoundError("cluster", self.name, f"workspace {self.workspace.name!r}")
        self._spec = ClusterSpec.from_dict(data)
        return self

    # -- state ------------------------------------------------------------------------------------------
    def _status(self) -> ClusterStatus:
        return self.workspace.backend.cluster_status(self._spec)

    def _state_of(self, st: ClusterStatus) -> ClusterState:
        if st.resizing or len(st.nodes) != self._spec.nodes:
            return ClusterState.RESIZING
        return ClusterState.STEADY

    @property
    def state(self) -> ClusterState:
        return self._state_of(self._status())

    def node_states(self, status: ClusterStatus | None = None) -> dict[str, NodeState]:
        """Each node's state: the backend's (preparing, leaving, unusable) or, from the assignments the
        cluster's scheduler publishes, running / preparing (job preparation) / idle."""
        st = status or self._status()
        held = self.workspace.backend.scheduler(self._spec).assignments()
        out: dict[str, NodeState] = {}
        for node in st.nodes:
            if node.id in st.node_states:
                out[node.id] = st.node_states[node.id]
            elif node.id in held:
                out[node.id] = (
                    NodeState.PREPARING if held[node.id].phase == "preparing" else NodeState.RUNNING
                )
            else:
                out[node.id] = NodeState.IDLE
        return out

    @property
    def node_counts(self) -> NodeCounts:
        return count_nodes(list(self.node_states().values()))

    def active_jobs(self) -> list[Job]:
        """Jobs on this cluster that are queued or running."""
        out = []
        for exp in self.workspace.list_experiments():
            for job in exp.list_jobs():
                if job.spec.cluster == self.name and not job.state.ended:
                    out.append(job)
        return out

    # -- operations -------------------------------------------------------------------------------------
    def resize(self, nodes: int, *, timeout: float | None = None, wait: bool = False) -> Cluster:
        """Set the target node count (0 releases every node); with ``wait``, block until steady."""
        validate_node_target(nodes, "nodes")
        old = self._spec
        new = ClusterSpec.from_dict({**old.to_dict(), "nodes": nodes})
        self.workspace.backend.resize_cluster(old, nodes, timeout=timeout)
        self.workspace.share.write_json(layout.cluster_record(self.name), new.to_dict())
        self._spec = new
        if self.active_jobs():  # queued jobs that no longer fit are failed by the scheduler, with why
            status = self._status()
            usable = tuple(n for n in status.nodes if n.id not in status.node_states)
            if usable:
                self.workspace.backend.scheduler(new).update_nodes(usable, timeout=timeout)
        if wait:
            self.wait_until_steady(timeout=timeout)
        return self

    def delete(self, *, force: bool = False, timeout: float | None = 60) -> None:
        """Remove the cluster. Refused while it runs jobs unless ``force`` (which terminates them)."""
        active = self.active_jobs()
        if active and not force:
            raise ClusterBusyError(self.name, [f"{j.experiment.name}/{j.name}" for j in active])
        for job in active:
            job.terminate(timeout=timeout)
        self.workspace.backend.delete_cluster(self._spec)
        self.workspace.share.delete(layout.cluster_dir(self.name), recursive=True)

    def wait_until_steady(
        self, timeout: float | None = None, *, poll_interval: float = 2.0, show_progress: bool | None = None
    ) -> Cluster:
        """Block until the cluster is ``steady`` (every target node exists); a spinner shows node counts."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with _progress.status(f"cluster {self.name}", show_progress) as update:
            while True:
                st = self._status()
                if self._state_of(st) is ClusterState.STEADY:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise BatchAITimeoutError(f"cluster {self.name!r} to become steady", timeout or 0)
                counts = count_nodes(list(self.node_states(st).values()))
                update(f"resizing to {self._spec.nodes} node(s): {counts}")
                time.sleep(poll_interval)
        return self

    # -- views ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        st = self._status()
        counts = count_nodes(list(self.node_states(st).values()))
        return {
            "name": self.name,
            "workspace": self.workspace.name,
            "vmSize": self.vm_size.upper(),
            "vmPriority": self.vm_priority,
            "targetNodeCount": self._spec.nodes,
            "allocationState": self._state_of(st).value,
            "currentNodeCount": counts.total,
            "nodeStateCounts": counts.to_batchai(),
            "creationTime": self._spec.created.isoformat(),
        }

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}, vm_size={self.vm_size!r}, nodes={self._spec.nodes})"

    def _repr_html_(self) -> str:
        from ._display import cluster_html

        return cluster_html(self)
