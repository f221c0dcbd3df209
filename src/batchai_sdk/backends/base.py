"""The small interface every backend implements: where nodes and the share come from.

The object model (workspace/cluster/job) keeps its records on the share and calls only this interface;
the job wrapper that runs on the head node gets everything it needs in a ``LaunchTarget``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from .._models import ClusterSpec, Node, NodeState
from ..exceptions import BackendError, NotSupportedError, ValidationError
from ..mounts import Mount, describe, storage_key
from ..node.protocol.launch import LaunchConfig
from ..node.protocol.requests import Reply
from ..remote.base import Runner
from ..share import Share

if TYPE_CHECKING:
    from ..launch import LaunchTarget as LaunchTarget  # re-exported: the backends make it, launch.py reads it
else:

    def __getattr__(name: str) -> Any:
        # The re-export loads launch.py (toolkits, subprocess) on first use, not with batchai_sdk.
        if name == "LaunchTarget":
            from ..launch import LaunchTarget

            return LaunchTarget
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ClusterStatus:
    """What the backend knows of a cluster's machines.

    ``node_states`` holds infrastructure states only (preparing while node setup runs, leaving,
    unusable); nodes missing from it are available, and the object model decides idle vs running from
    the job records on the share.
    """

    resizing: bool
    nodes: tuple[Node, ...]
    node_states: Mapping[str, NodeState] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)  # node id → why it is unusable


@dataclass(frozen=True)
class JobRequest:
    """What a cluster scheduler needs to queue one job; its files are already staged on the share."""

    experiment: str
    name: str
    node_count: int
    launch_config: str  # share-relative path of the job's launch.json
    max_wall_clock_seconds: float | None = None
    created: str | None = None  # creation time (ISO 8601) as the status record says
    hang_timeout: float | None = None  # the watchdog: no output for this long ends the job (None: off)
    hang_notice: float | None = (
        None  # observe mode: no output for this long → stacks and a notice (None: off)
    )
    max_retries: int = 0
    retry_on_exit_codes: tuple[int, ...] = ()
    max_cost: float | None = None  # with price_per_node_hour: end the job once its estimate passes it
    price_per_node_hour: float | None = None
    scheduling_priority: str = "normal"  # low, normal, high: the cluster's queue starts higher ones first
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)  # never written to the share
    # the job's own mounts with their keys (Azure Batch mounts them with the task; others have already)
    mounts: tuple[Mount, ...] = field(default=(), repr=False)

    @property
    def key(self) -> str:
        return f"{self.experiment}/{self.name}"


@dataclass(frozen=True)
class Assignment:
    """A node held by a job, as the cluster's scheduler published it."""

    job: str  # "<experiment>/<job>"
    phase: str  # "preparing" | "running" | "cleaning" | "unusable"
    reason: str = ""  # why a node is unusable (the health gate's failed checks, ...)


@dataclass(frozen=True)
class Activity:
    """Whether a cluster is in use, as its scheduler published it: ``busy`` while a job holds a node or
    waits in its queue; otherwise ``last_end`` is when its last job ended (None: no job has ended)."""

    busy: bool
    last_end: datetime | None = None


class ClusterScheduler(ABC):
    """The one authority that queues a cluster's jobs and places them on its nodes.

    Implementations: the head-node scheduler (local, SSH, Azure: ``node/scheduler/daemon.py`` over a Runner)
    and Slurm (sbatch/squeue/scancel). Job status is read from the share's records, never from here.
    """

    @abstractmethod
    def submit(self, request: JobRequest, *, timeout: float | None = None) -> None:
        """Queue the job. Raises AlreadyExistsError when the cluster already knows a job of that name."""

    @abstractmethod
    def terminate(self, experiment: str, name: str, *, timeout: float | None = None) -> bool:
        """Stop the job (queued or running): every process of it on every node. False when the
        scheduler does not know it as queued or running (it ended, or was lost)."""

    @abstractmethod
    def assignments(self) -> Mapping[str, Assignment]:
        """node id → the job holding it (nodes absent are free)."""

    def activity(self) -> Activity | None:
        """Whether the cluster runs or queues a job, and when the last one ended; None where the
        scheduler does not publish it (Slurm: the cluster is not ours to size)."""
        return None

    def ensure_running(self) -> None:  # noqa: B027 - Slurm's daemons are not ours to start
        """Start the scheduler again if it died (it then resumes its queue)."""

    def head_lost(self) -> bool:
        """Whether the node that runs the scheduler does not answer this client (False where unknown)."""
        return False

    def revive(self) -> None:
        """The scheduler stopped reporting (its head node may be lost): make sure one runs, on another
        node where the head does not answer. By default ``ensure_running``."""
        self.ensure_running()

    def job_state(self, experiment: str, name: str, *, timeout: float | None = None) -> Reply | None:
        """What the scheduler itself holds of the job (``found``, ``state``, ``exit_code``,
        ``failure_reason``, ``end_time``), for when its published record went stale; None where the
        scheduler cannot say (Slurm: its own queue is read by ``refresh``)."""
        return None

    def refresh(self, experiment: str, name: str) -> object:
        """Bring the job's status record up to date where the scheduler does not publish it by itself."""
        return None

    def configure(self, *, timeout: float | None = None) -> None:
        """Hand the scheduler the cluster's configuration (its nodes, autoscale settings), starting it
        where it sleeps: control calls (a job's state, a terminate, a ping) do not carry it."""
        self.ensure_running()

    def update_nodes(self, nodes: tuple[Node, ...], *, timeout: float | None = None) -> None:  # noqa: B027
        """Tell the scheduler the cluster's nodes changed (resize): queued jobs that no longer fit fail."""

    def sync_health(self, *, timeout: float = 15.0) -> None:  # noqa: B027 - no gate of ours to sync
        """Wait until the scheduler has applied the cluster's health reports (where it is ours)."""

    def check_nodes(self, level: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Run the health gate across the cluster's nodes; its report (see ``node/gate/run.py``)."""
        raise BackendError(
            "the health gate runs where the cluster's scheduler is ours (local, SSH, Azure); on Slurm, "
            "Slurm's own HealthCheckProgram (e.g. NHC) keeps bad nodes out"
        )

    def report_health(self, report: Mapping[str, Any], *, timeout: float | None = None) -> None:
        """Hand a health report to the cluster's scheduler, which signs and applies it."""
        self.check_nodes("basic", timeout=0)  # the same refusal: no gate of ours here


class Backend(ABC):
    """Nodes and a share. Implementations: LocalBackend, SSHBackend, AzureBackend."""

    kind: ClassVar[str]
    workspace: str
    share: Share
    # The platform's own queue holds a job until nodes exist (Azure Batch): submit picks no nodes.
    queues_for_nodes: ClassVar[bool] = False
    # whether job preparation on its nodes installs source_dir's requirements (node/job/requirements.py)
    installs_requirements: ClassVar[bool] = True
    # Job records are brought up to date by the scheduler's refresh() when read (Slurm, Azure Batch).
    status_from_scheduler: ClassVar[bool] = False
    # True where touching the share creates cloud resources (Azure): the workspace then writes nothing until
    # its first experiment or cluster, so that constructing it makes no call.
    provisions_lazily: ClassVar[bool] = False
    # The cluster's scheduler is started when the cluster is created or grown, as a Batch AI cluster's head
    # was up before its first job (local: the head node is this machine and costs nothing while idle; it
    # still exits once idle, and a submit starts it again).
    starts_scheduler_with_cluster: ClassVar[bool] = False

    def describe(self) -> dict[str, Any]:
        """Facts for reprs and ``workspace show`` (never secrets)."""
        return {"kind": self.kind, "workspace": self.workspace, "share": self.share.name}

    def check_cluster(self, spec: ClusterSpec) -> object:
        """Preflight of a cluster, creating nothing: raise when the backend would refuse it (Azure: a VM
        size not offered, a vCPU quota too small). Backends with nothing to check pass."""
        return None

    def undeclared_mounts(self, spec: ClusterSpec, named: Mapping[str, str]) -> list[str]:
        """A job names ``$AZ_BATCHAI_MOUNT_ROOT/<name>`` (``named``: name → the job's field naming it) that
        cluster ``spec`` does not mount: refused, naming the cluster's mounts. The local backend makes such
        a folder instead and returns a note."""
        name, field_name = next(iter(named.items()))
        have = ", ".join(m.relative_mount_path for m in spec.mounts) or "none"
        raise ValidationError(
            field_name,
            f"$AZ_BATCHAI_MOUNT_ROOT/{name}",
            f"a mount of cluster {spec.name!r} (its mounts: {have}; the workspace share: "
            f"$AZ_BATCHAI_MOUNT_ROOT/{self.share.name}), or a job mount under $AZ_BATCHAI_JOB_MOUNT_ROOT",
        )

    def prepare_job_mounts(self, spec: ClusterSpec, nodes: tuple[Node, ...], mounts: Sequence[Mount]) -> None:
        """Make a job's own mounts visible on ``nodes`` at ``LaunchTarget.storage_root``/<storage key>
        before it starts. By default a job may only mount what the cluster mounts (the same storage)."""
        declared = {storage_key(m) for m in spec.mounts}
        for i, mount in enumerate(mounts):
            if storage_key(mount) not in declared:
                raise ValidationError(
                    f"mounts[{i}]",
                    describe(mount),
                    f"storage cluster {spec.name!r} mounts (the {self.kind} backend mounts nothing per job)",
                )

    def storage(self, mount: Mount) -> Share:
        """The storage ``mount`` names, as a share this machine can upload to and read (local backend)."""
        raise NotSupportedError(
            "reading a mount's storage from this machine", self.kind, "read it on the nodes"
        )

    def storage_exists(self, mount: Mount) -> bool | None:
        """Whether the storage ``mount`` names exists; None where this machine cannot tell."""
        return None

    def names_workspace_share(self, mount: Mount) -> bool | None:
        """Whether ``mount`` names the workspace's own share; None where this machine cannot tell."""
        return None

    def simulate_eviction(self, spec: ClusterSpec, node: str) -> bool:
        """Have the platform evict ``node`` as it evicts a Spot VM (Azure's simulateEviction); False when
        the backend cannot (the caller then leaves the notice on the share itself)."""
        return False

    @abstractmethod
    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        """Provision ``spec.nodes`` machines (may return while they are still being made)."""

    @abstractmethod
    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        """Change the cluster's target size (0 allowed)."""

    @abstractmethod
    def delete_cluster(self, spec: ClusterSpec) -> None:
        """Remove the cluster's machines and what only they used; no error when already gone."""

    @abstractmethod
    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        """Current machines of the cluster and their infrastructure states."""

    @abstractmethod
    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """Make ``nodes`` ready for a job: reachable (else NodeError naming each node), node setup done.

        Idempotent; raises before anything of the job has started.
        """

    @abstractmethod
    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        """The facts the job wrapper needs to start ranks on ``nodes`` (the first is the head)."""

    def head_node(self, spec: ClusterSpec) -> Node | None:
        """The cluster's head node where the backend knows it without asking the machines (a control call
        then reaches its scheduler without a probe of every node); None: from ``cluster_status``."""
        return None

    @abstractmethod
    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> Runner:
        """A runner on the job's head node, where the wrapper starts detached."""

    def guard_host(self, config: LaunchConfig) -> list[str]:
        """Take out of a job's launch configuration what must not change this machine unasked; returns
        what was skipped, each with how to allow it. Only the local backend's nodes are the user's own
        computer."""
        return []

    def job_files(self, experiment: str, job: str, directory: str) -> Share | None:
        """Files of a job kept outside the workspace share under a directory id of their own (Azure
        Batch: ``"batch"``, the task's files on its node), or None."""
        return None

    def scale_set(self, spec: ClusterSpec) -> dict[str, str] | None:
        """Where the head node can change the cluster's capacity itself (Azure: the scale set), or None."""
        return None

    def scheduler(self, spec: ClusterSpec, *, nodes: tuple[Node, ...] | None = None) -> ClusterScheduler:
        """The authority that queues and places the cluster's jobs: by default our scheduler on the
        cluster's head node; a Slurm backend returns Slurm. ``nodes``: the cluster's usable nodes when
        the caller has just found them (submit, resize), so they are not asked for again."""
        from .head_scheduler import HeadNodeScheduler

        return HeadNodeScheduler(self, spec, nodes)

    def delete(self) -> None:  # noqa: B027 - backends with cloud resources override
        """Remove what the workspace created outside its records (cloud resources)."""

    def close(self) -> None:  # noqa: B027
        """Release connections."""
