"""A cluster: a named set of nodes of one VM size. Thin — the backend owns the machines."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from . import _progress
from ._health import HealthReport
from ._models import (
    ClusterSpec,
    ClusterState,
    NodeCounts,
    NodeState,
    PendingReason,
    autoscale_settings,
    count_nodes,
    utcnow,
    validate_health_level,
    validate_node_target,
)
from .backends.base import ClusterStatus
from .cost import format_cost
from .exceptions import (
    BatchAIError,
    BatchAITimeoutError,
    ClusterBusyError,
    NotFoundError,
    NothingToEvictError,
    ValidationError,
)
from .node.policy.autoscale import DEFAULT_IDLE_SECONDS
from .node.protocol.paths import simulated_eviction
from .node.protocol.records import NodesDoc
from .share import join

log = logging.getLogger("batchai_sdk")

GROW_TIMEOUT = 1800.0  # seconds Job.submit waits for an Azure scale set to grow for it

if TYPE_CHECKING:
    from .job import Job
    from .pricing import Price
    from .workspace import Workspace


def _event_time(event: dict[str, Any]) -> datetime:
    """When an event happened, for ordering; an unreadable time sorts first."""
    try:
        when = datetime.fromisoformat(str(event.get("time")))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


class Cluster:
    """Handle on a cluster; every property reads the current state (nothing is cached but the spec)."""

    def __init__(self, workspace: Workspace, spec: ClusterSpec) -> None:
        self.workspace = workspace
        self._spec = spec

    @property
    def name(self) -> str:
        """The cluster's name, unique in its workspace."""
        return self._spec.name

    @property
    def spec(self) -> ClusterSpec:
        """The cluster's spec, ``nodes`` being its size now (with autoscale, as its scheduler set it)."""
        auto = self._spec.autoscale
        if auto is None:
            return self._spec
        size = self.workspace.share.read_json_or_none(layout.SHARE.size_record(self.name))
        nodes = len(size["nodes"]) if size and isinstance(size.get("nodes"), list) else auto.initial
        return replace(self._spec, nodes=nodes)

    @property
    def max_nodes(self) -> int:
        """The most nodes a job may ask for: the size, or max_nodes with autoscale."""
        auto = self._spec.autoscale
        return auto.max_nodes if auto is not None else self._spec.nodes

    def set_autoscale(
        self,
        *,
        min_nodes: int,
        max_nodes: int,
        initial_nodes: int | None = None,
        idle_seconds_before_scaledown: float | None = DEFAULT_IDLE_SECONDS,
    ) -> Cluster:
        """Let the cluster's scheduler size it: grow for queued jobs up to ``max_nodes``, let nodes idle for
        ``idle_seconds_before_scaledown`` go down to ``min_nodes`` (no client needs to stay up)."""
        auto = autoscale_settings(min_nodes, max_nodes, initial_nodes, idle_seconds_before_scaledown)
        before = self.spec.nodes
        self._spec = replace(self._spec, autoscale=auto)
        self.workspace.share.write_json(layout.SHARE.cluster_record(self.name), self._spec.to_dict())
        why = f"autoscale set by the user: {auto.to_dict()}"
        self._event({"from": before, "to": self.spec.nodes, "reason": why})
        self.workspace.backend.scheduler(self.spec).configure()  # the settings reach a running scheduler
        return self

    def simulate_eviction(self, node: str | None = None, *, grace_seconds: float = 30.0) -> str:
        """Evict ``node`` (default: the first node running a job) as Azure evicts a Spot VM, to try a
        job's resume path before it costs anything: the node's ranks get SIGTERM, have ``grace_seconds``
        to checkpoint, and the job is requeued (no retry spent) and starts again with
        ``AZ_BATCHAI_JOB_RESTART_COUNT`` raised. Returns the job it hit (``experiment/job``).

        On an Azure low-priority (Spot) cluster Azure itself evicts the VM (its simulateEviction API):
        the node gets the real Scheduled Events notice (at least 30 s; ``grace_seconds`` does not apply)
        and the VM is then deleted, as in a real eviction."""
        held = self.workspace.backend.scheduler(self.spec).assignments()
        if node is None and not held:
            raise NothingToEvictError(self.name)
        node = node if node is not None else sorted(held)[0]
        if node not in held:
            busy = ", ".join(sorted(held)) or "none"
            raise ValidationError(
                "node", node, f"a node of cluster {self.name!r} that runs a job (now: {busy})"
            )
        if self.workspace.backend.simulate_eviction(self.spec, node):
            return held[node].job  # the platform's own eviction: its notice reaches the node's watcher
        experiment, _, job = held[node].job.partition("/")
        notice = {
            "event_id": f"simulated-{utcnow():%Y%m%d%H%M%S}",
            "event_type": "Preempt",
            "not_before": (utcnow() + timedelta(seconds=grace_seconds)).isoformat(),
            "grace_seconds": grace_seconds,
            "source": "simulate_eviction",
        }
        path = join(layout.SHARE.run_dir(experiment, job), simulated_eviction(node))
        self.workspace.share.write_json(path, notice)
        return held[node].job

    def check(self) -> None:
        """Preflight, creating nothing: on Azure, that the VM size is offered to the subscription in the
        region and that the vCPU quotas hold the cluster at ``max_nodes`` (``AzureQuotaError`` naming
        the quota request to file, or sizes that are offered). ``create_cluster`` runs it first."""
        self.workspace.backend.check_cluster(self.spec)

    def events(self) -> list[dict[str, Any]]:
        """Every scaling decision, oldest first: time, from → to, nodes removed, why."""
        share = self.workspace.share
        texts = []
        with contextlib.suppress(NotFoundError):
            texts.append(share.read_text(layout.SHARE.events_record(self.name)))
        with contextlib.suppress(NotFoundError):
            folder = layout.SHARE.client_events_dir(self.name)
            for info in share.list(folder):
                with contextlib.suppress(NotFoundError):
                    texts.append(share.read_text(join(folder, info.name)))
        out = []
        for line in "\n".join(texts).splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return sorted(out, key=_event_time)

    def _event(self, fields: dict[str, Any]) -> None:
        # One file per client decision: the scheduler alone appends to events.jsonl on the head node, so
        # two clients and the scheduler never rewrite each other's lines.
        when = utcnow()
        line = json.dumps({"time": when.isoformat(), **fields}, sort_keys=True)
        import uuid

        path = layout.cluster_client_event(self.name, when.strftime("%Y%m%dT%H%M%S%fZ"), uuid.uuid4().hex[:8])
        self.workspace.share.write_text(path, line + "\n")

    @property
    def vm_size(self) -> str:
        """The VM size it was created with, e.g. ``Standard_NC4as_T4_v3`` (only Azure provisions by it)."""
        return self._spec.vm_size

    @property
    def vm_priority(self) -> str:
        """``"dedicated"`` or ``"lowpriority"`` (Spot VMs on Azure, which can be evicted)."""
        return self._spec.vm_priority.value

    @property
    def target_nodes(self) -> int:
        """The number of nodes the cluster is asked to have (``resize``, autoscale)."""
        return self.spec.nodes

    @property
    def price_per_hour(self) -> Price | None:
        """Per node-hour: the user's ``price_per_hour``, else 0 on local/SSH, the Azure Retail Prices
        API's on Azure; None when unknown (see cost.py)."""
        from .cost import price_of_cluster

        return price_of_cluster(self)

    @property
    def cost_so_far(self) -> float | None:
        """Estimated cost since creation: price per node-hour × node-hours, from the cluster's size over
        time (its creation, then every scaling event); None when the price is unknown."""
        from .cost import cluster_cost_so_far, node_hours

        changes = [e for e in self.events() if "to" in e and "time" in e]
        auto = self._spec.autoscale
        at_creation = self._spec.nodes if auto is None else auto.initial  # true until the first change
        if changes and "from" in changes[0]:
            at_creation = int(changes[0]["from"])  # the spec now holds the latest size, not the first
        points = [(self._spec.created, at_creation)]
        points += [(datetime.fromisoformat(e["time"]), int(e["to"])) for e in changes]
        price = self.price_per_hour
        return cluster_cost_so_far(price.value if price is not None else None, node_hours(points))

    @property
    def idle_since(self) -> datetime | None:
        """Since when no job has run or waited on the cluster: its last job's end, or its creation when no
        job ever ended. None while a job runs or is queued, and where unknown (Slurm). With
        ``nodes_up`` it answers "is this cluster forgotten?" (see docs/cost.md)."""
        activity = self.workspace.backend.scheduler(self._spec).activity()
        if activity is None or activity.busy:
            return None
        created = self._spec.created
        return max(activity.last_end, created) if activity.last_end is not None else created

    @property
    def idle_seconds(self) -> float | None:
        """Seconds since ``idle_since``; None while a job runs or is queued, or where unknown."""
        since = self.idle_since
        return None if since is None else max(0.0, (utcnow() - since).total_seconds())

    @property
    def nodes_up(self) -> int:
        """Nodes the cluster has now, whatever their state (with autoscale: as its scheduler sized it)."""
        return count_nodes(list(self.node_states().values())).total

    def refresh(self) -> Cluster:
        """Re-read the cluster's record from the share; raises ``NotFoundError`` once it is deleted."""
        data = self.workspace.share.read_json_or_none(layout.SHARE.cluster_record(self.name))
        if data is None:
            raise NotFoundError("cluster", self.name, f"workspace {self.workspace.name!r}")
        self._spec = ClusterSpec.from_dict(data)
        return self

    # -- state ------------------------------------------------------------------------------------------
    def _status(self) -> ClusterStatus:
        return self.workspace.backend.cluster_status(self.spec)

    def _state_of(self, st: ClusterStatus) -> ClusterState:
        if st.resizing or len(st.nodes) != self.spec.nodes:
            return ClusterState.RESIZING
        return ClusterState.STEADY

    @property
    def state(self) -> ClusterState:
        """``ClusterState.RESIZING`` while nodes come or go, else ``ClusterState.STEADY``."""
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
                phase = held[node.id].phase
                out[node.id] = {"preparing": NodeState.PREPARING, "unusable": NodeState.UNUSABLE}.get(
                    phase, NodeState.RUNNING
                )
            else:
                out[node.id] = NodeState.IDLE
        return out

    def unusable_nodes(self) -> dict[str, str]:
        """Nodes kept out of jobs, with why: the health gate's failed checks, or "stopped answering"."""
        held = self.workspace.backend.scheduler(self._spec).assignments()
        return {node: a.reason or "unusable" for node, a in held.items() if a.phase == "unusable"}

    def failed_health(self) -> dict[str, str]:
        """The nodes kept out by the health gate, with their failed checks (see ``unusable_nodes``)."""
        return {n: why for n, why in self.unusable_nodes().items() if why != "stopped answering"}

    def check_nodes(self, level: str = "basic", *, timeout: float | None = None) -> HealthReport:
        """Run the health gate on every node now (``"basic"``: seconds; ``"full"``: about a minute, with
        all-reduce bandwidth per node and between nodes). Nodes that fail become ``unusable`` with their
        reason and get no job until a later check passes them; the report says which and why."""
        validate_health_level(level, "level")
        if level == "off":
            raise ValidationError("level", level, "'basic' or 'full'")
        scheduler = self.workspace.backend.scheduler(self._spec)
        report = HealthReport.from_dict(scheduler.check_nodes(level, timeout=timeout))
        self._event({"kind": "health_check", "level": level, "unusable": dict(report.unusable)})
        return report

    def apply_health_report(self, report: HealthReport | Mapping[str, Any]) -> None:
        """Apply a health report of your own (an NHC or DCGM policy's verdict): ``nodes`` checked, and
        ``unusable`` (node → reason) kept out; a node listed in ``nodes`` only is let in again. It goes
        through the cluster's scheduler, which signs it: a file written into the cluster's ``health/``
        folder is not believed (jobs can write there; docs/health.md)."""
        if isinstance(report, HealthReport):
            doc: dict[str, Any] = {
                "level": report.level,
                "nodes": list(report.nodes),
                "unusable": dict(report.unusable),
                "checks": [
                    {"node": c.node, "name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks
                ],
                "notes": list(report.notes),
            }
        elif isinstance(report, Mapping):
            doc = dict(report)
        else:
            raise ValidationError("report", type(report).__name__, "a HealthReport or a report dict")
        doc.setdefault("started", time.time())
        self.workspace.backend.scheduler(self._spec).report_health(doc)
        self._event({"kind": "health_report", "unusable": dict(doc.get("unusable") or {})})

    @property
    def node_counts(self) -> NodeCounts:
        """How many nodes are idle, running, preparing, leaving and unusable, as Batch AI counts them."""
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
        """Set the target node count (0 releases every node); with ``wait``, block until steady.
        On a cluster with autoscale, an explicit size turns autoscale off (``set_autoscale`` turns it on)."""
        validate_node_target(nodes, "nodes")
        self.workspace.deferred_sizes.pop(self.name, None)
        old = self.spec
        new = replace(self._spec, nodes=nodes, autoscale=None)
        self.workspace.backend.resize_cluster(old, nodes, timeout=timeout)
        self.workspace.share.write_json(layout.SHARE.cluster_record(self.name), new.to_dict())
        self._spec = new
        why = "resized by the user" + (" (autoscale off)" if old.autoscale else "")
        self._event({"from": old.nodes, "to": nodes, "reason": why})
        if self.active_jobs():  # queued jobs that no longer fit are failed by the scheduler, with why
            status = self._status()
            usable = tuple(n for n in status.nodes if n.id not in status.node_states)
            if usable:
                self.workspace.backend.scheduler(new, nodes=usable).update_nodes(usable, timeout=timeout)
        elif nodes > old.nodes:
            self._start_scheduler()
        if wait:
            self.wait_until_steady(timeout=timeout)
        return self

    def _start_scheduler(self) -> None:
        """Start the cluster's scheduler now where the backend starts it with the cluster (local), so the
        first job submitted finds it and its spare launcher up (the scheduler's start-up was most of the
        first job's wait). Only for a fixed size with nodes and no health gate: an autoscale cluster's
        scheduler sizes it and a gate checks nodes, which starting it would set going. It exits once idle
        as before; a failure to start is the next submit's to report (which starts it too)."""
        spec = self._spec
        backend = self.workspace.backend
        if not backend.starts_scheduler_with_cluster or spec.autoscale is not None or spec.nodes < 1:
            return
        if spec.health_check != "off":
            return
        try:
            backend.scheduler(spec).ensure_running()
        except BatchAIError as exc:
            log.debug("the scheduler of cluster %s did not start with it: %s", self.name, exc)

    def delete(self, *, force: bool = False, timeout: float | None = 60) -> None:
        """Remove the cluster. Refused while it runs jobs unless ``force`` (which terminates them)."""
        active = self.active_jobs()
        if active and not force:
            raise ClusterBusyError(self.name, [f"{j.experiment.name}/{j.name}" for j in active])
        for job in active:
            job.terminate(timeout=timeout)
        self.workspace.backend.delete_cluster(self._spec)
        self.workspace.share.delete(layout.SHARE.cluster_dir(self.name), recursive=True)

    def wait_until_steady(
        self, timeout: float | None = None, *, poll_interval: float = 2.0, show_progress: bool | None = None
    ) -> Cluster:
        """Block until the cluster is ``steady`` (every target node exists); a spinner shows node counts."""

        def steady(st: ClusterStatus) -> bool:
            return self._state_of(st) is ClusterState.STEADY

        self._wait_for(steady, "to become steady", self._spec.nodes, timeout, poll_interval, show_progress)
        return self

    def grow_for(
        self,
        node_count: int,
        *,
        why: str,
        timeout: float | None = GROW_TIMEOUT,
        poll_interval: float = 2.0,
        show_progress: bool | None = None,
    ) -> None:
        """Grow an autoscale cluster to at least ``node_count`` usable nodes (at most ``max_nodes``) and
        wait for them; ``why`` goes to the event log. ``Job.submit`` calls it on Azure, where a new VM joins
        only once this client has pinned its host key through ARM; idle nodes still go from the head node,
        without the client."""
        auto = self._spec.autoscale
        if auto is None or node_count > auto.max_nodes:
            raise ValidationError("node_count", node_count, f"at most the autoscale maximum of {self.name!r}")
        st = self._status()
        up = [n for n in st.nodes if st.node_states.get(n.id) is not NodeState.LEAVING]
        if len(up) < node_count:
            self.workspace.backend.resize_cluster(self._spec, node_count, timeout=timeout)
            self._event({"from": len(up), "to": node_count, "reason": why})

        def usable(st: ClusterStatus) -> bool:
            return not st.resizing and sum(n.id not in st.node_states for n in st.nodes) >= node_count

        self._wait_for(
            usable, f"to have {node_count} usable node(s)", node_count, timeout, poll_interval, show_progress
        )

    def _wait_for(
        self,
        done: Callable[[ClusterStatus], bool],
        what: str,
        target: int,
        timeout: float | None,
        poll_interval: float,
        show_progress: bool | None,
    ) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with _progress.status(f"cluster {self.name}", show_progress) as update:
            while True:
                st = self._status()
                if done(st):
                    return
                if deadline is not None and time.monotonic() > deadline:
                    raise BatchAITimeoutError(f"cluster {self.name!r} {what}", timeout or 0)
                counts = count_nodes(list(self.node_states(st).values()))
                update(f"resizing to {target} node(s): {counts}")
                time.sleep(poll_interval)

    # -- views ------------------------------------------------------------------------------------------
    def queue(self) -> dict[str, PendingReason]:
        """The queued jobs (``experiment/name``) in the queue's order, each with why it waits and until
        when, as the cluster's scheduler last published them ({} where the backend's queue is its own)."""
        doc = self.workspace.share.read_json_or_none(layout.SHARE.nodes_record(self.name)) or {}
        found = NodesDoc.from_dict(doc).pending if isinstance(doc, dict) else {}
        reasons = {key: PendingReason.from_doc(p) for key, p in found.items()}
        ordered = sorted(reasons.items(), key=lambda kv: (kv[1].position or 0) if kv[1] else 0)
        return {key: why for key, why in ordered if why is not None}

    def to_dict(self) -> dict[str, Any]:
        """The cluster as ``az batchai cluster show`` prints it (JSON-ready): state, node counts, scale
        settings, cost."""
        st = self._status()
        counts = count_nodes(list(self.node_states(st).values()))
        since = self.idle_since
        from .batchai_json.mounts import mount_volumes_json

        mounts = (
            {"nodeSetup": {"mountVolumes": mount_volumes_json(self._spec.mounts)}}
            if self._spec.mounts
            else {}
        )
        return {
            "name": self.name,
            "workspace": self.workspace.name,
            "vmSize": self.vm_size.upper(),
            "vmPriority": self.vm_priority,
            "targetNodeCount": self.spec.nodes,
            "allocationState": self._state_of(st).value,
            "currentNodeCount": counts.total,
            "nodeStateCounts": counts.to_batchai(),
            "creationTime": self._spec.created.isoformat(),
            "scaleSettings": (
                {"autoScale": self._spec.autoscale.to_batchai()}
                if self._spec.autoscale
                else {"manual": {"targetNodeCount": self._spec.nodes}}
            ),
            "pricePerNodeHour": str(self.price_per_hour) if self.price_per_hour is not None else "unknown",
            "costSoFar": format_cost(self.cost_so_far),
            "idleSince": since.isoformat() if since is not None else None,
            "idleSeconds": round((utcnow() - since).total_seconds()) if since is not None else None,
            "queue": [{"job": key, **why.to_dict()} for key, why in self.queue().items()],
            **mounts,
        }

    def __repr__(self) -> str:
        price = self.price_per_hour
        shown = f", {price}" if price is not None and price.value else ""
        return f"Cluster({self.name!r}, vm_size={self.vm_size!r}, nodes={self.spec.nodes}{shown})"

    def _repr_html_(self) -> str:
        from ._display import cluster_html

        return cluster_html(self)
