"""An existing Slurm cluster: its partition is our cluster, its scheduler queues and places our jobs.

Slurm's commands run on a login node over SSH (``login_host``), or here when this machine is one
(``login_host=None``). The workspace share is ``share_path``, a directory every Slurm node sees (NFS,
Lustre, BeeGFS, an Azure Files/NetApp mount on CycleCloud Workspace for Slurm); the client reaches it
through SFTP on the login node, or directly.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._models import ClusterSpec, Node, NodeCounts, NodeState, count_nodes
from ...exceptions import NodeError, NotFoundError, NotSupportedError, ValidationError
from ...remote.base import BorrowedRunner, Runner
from ...remote.host_keys import HostKeyStore
from ...remote.local import LocalRunner
from ...share import LocalShare, Share
from ..base import Backend, ClusterStatus, LaunchTarget
from ..local import default_root
from . import states
from .commands import NodeInfo, SlurmCommands

if TYPE_CHECKING:
    from .scheduler import SlurmScheduler

_PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_MPI_TYPES = ("pmi2", "pmix", "pmix_v3", "pmix_v4", "pmix_v5", "none")

RESIZE_HINT = (
    "Slurm manages the partition's capacity (its nodes, power saving and cloud autoscale, e.g. "
    "CycleCloud Workspace for Slurm); change it with Slurm's own tools, not cluster.resize()"
)


class SlurmBackend(Backend):
    kind = "slurm"
    status_from_scheduler = True

    def __init__(
        self,
        name: str,
        *,
        share_path: str,
        partition: str | None = None,
        account: str | None = None,
        login_host: str | None = None,
        user: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        port: int = 22,
        known_hosts: str | os.PathLike[str] | None = None,
        trust_on_first_use: bool = False,
        python: str = "python3",
        mpi: str = "pmix",
        constraint: str | None = None,
        gpus_per_node: int = 0,
        temp_root: str = "/tmp/batchai",  # noqa: S108 - a node-local folder on the compute nodes
        sbatch_options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        command_timeout: float = 60.0,
        runner: Runner | None = None,
    ) -> None:
        if not isinstance(share_path, str) or not share_path.startswith("/") or share_path.rstrip("/") == "":
            raise ValidationError(
                "share_path", share_path, "an absolute path below / that every Slurm node sees"
            )
        for field_name, value in (("partition", partition), ("account", account)):
            if value is not None and (not isinstance(value, str) or not _PARTITION_RE.match(value)):
                raise ValidationError(field_name, value, "a Slurm name of letters, digits, '_', '-' and '.'")
        if mpi not in _MPI_TYPES:
            raise ValidationError("mpi", mpi, f"one of {', '.join(_MPI_TYPES)} (srun --mpi)")
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 0:
            raise ValidationError("gpus_per_node", gpus_per_node, "an integer >= 0")
        if not temp_root.startswith("/"):
            raise ValidationError("temp_root", temp_root, "an absolute path on the nodes")
        self.workspace = name
        self.share_path = posixpath.normpath(share_path)
        self.partition = partition
        self.account = account
        self.login_host = login_host
        self.python = python
        self.mpi = mpi
        self.constraint = constraint
        self.gpus_per_node = gpus_per_node
        self.temp_root = temp_root
        self.sbatch_options = tuple(sbatch_options)
        self.env = dict(env or {})
        if runner is not None:
            self.runner: Runner = runner
        elif login_host is None:
            self.runner = LocalRunner(os.uname().nodename.split(".")[0])
        else:
            from ...remote.ssh import SSHRunner

            store = HostKeyStore(
                Path(known_hosts).expanduser()
                if known_hosts is not None
                else default_root() / "slurm" / name / "known_hosts",
                trust_on_first_use=trust_on_first_use,
            )
            self.runner = SSHRunner(
                login_host,
                host_keys=store,
                user=user,
                port=port,
                key_file=os.path.expanduser(os.fspath(key_file)) if key_file is not None else None,
                connect_kwargs=dict(connect_kwargs or {}),
            )
        self.commands = SlurmCommands(self.runner, env=self.env, timeout=command_timeout)
        if login_host is None and runner is None:
            self.share: Share = LocalShare(self.share_path, name=posixpath.basename(self.share_path))
        else:
            from ...remote.ssh import SSHRunner
            from ..ssh.share import SFTPShare

            if not isinstance(self.runner, SSHRunner):
                raise ValidationError("runner", self.runner, "an SSHRunner when login_host is set")
            self.share = SFTPShare(self.runner, self.share_path)

    def __repr__(self) -> str:
        where = self.login_host or "this machine"
        return f"SlurmBackend({self.workspace!r}, partition={self.partition!r}, login={where!r})"

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "partition": self.partition,
            "account": self.account,
            "login_host": self.login_host,
            "share_path": self.share_path,
            "mpi": self.mpi,
        }

    # -- partitions --------------------------------------------------------------------------------------
    def partition_of(self, spec: ClusterSpec) -> str:
        """The Slurm partition a cluster stands for: ``partition=`` of the cluster, else the workspace's,
        else a partition named like the cluster."""
        value = spec.extra.get("partition") or self.partition or spec.name
        if not isinstance(value, str) or not _PARTITION_RE.match(value):
            raise ValidationError("partition", value, "a Slurm partition name")
        return value

    def check_partition(self, spec: ClusterSpec) -> str:
        partition = self.partition_of(spec)
        if partition not in self.commands.partitions():
            raise NotFoundError("partition", partition, "Slurm (sinfo)")
        return partition

    def _sinfo(self, spec: ClusterSpec) -> list[NodeInfo]:
        partition = self.partition_of(spec)
        seen: dict[str, NodeInfo] = {}
        for info in self.commands.sinfo(partition):
            seen.setdefault(info.name, info)
        if not seen and partition not in self.commands.partitions():
            raise NotFoundError("partition", partition, "Slurm (sinfo)")
        return list(seen.values())

    # -- Backend -----------------------------------------------------------------------------------------
    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        """Nothing to provision: the partition must exist."""
        self.check_partition(spec)

    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        raise NotSupportedError("resize", self.kind, RESIZE_HINT)

    def delete_cluster(self, spec: ClusterSpec) -> None:
        """Forget the cluster; the partition and its nodes are Slurm's and stay."""
        return None

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        """The partition's nodes; ``node_states`` holds the infrastructure states (preparing, leaving,
        unusable) as the interface asks; ``node_counts`` has Slurm's full picture."""
        nodes: list[Node] = []
        node_states: dict[str, NodeState] = {}
        reasons: dict[str, str] = {}
        for info in self._sinfo(spec):
            nodes.append(Node(id=info.name, address=info.name, machine=info.name, slots=max(1, info.cpus)))
            state, why = states.node_state(info.state)
            if state in (NodeState.PREPARING, NodeState.LEAVING, NodeState.UNUSABLE):
                node_states[info.name] = state
            if why:
                reasons[info.name] = why + (
                    f": {info.reason}" if info.reason and info.reason != "none" else ""
                )
        return ClusterStatus(resizing=False, nodes=tuple(nodes), node_states=node_states, reasons=reasons)

    def node_counts(self, spec: ClusterSpec) -> NodeCounts:
        """Counts of the partition's nodes by our states, from sinfo (jobs of every user count)."""
        return count_nodes([states.node_state(info.state)[0] for info in self._sinfo(spec)])

    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """Slurm prepares its nodes; here the partition is checked, and that each of the cluster's mounts
        is there (the site mounts storage on its nodes; we mount nothing)."""
        self.check_partition(spec)
        check_mount_paths(self.runner, spec, posixpath.dirname(self.share_path))

    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        """What the launcher needs; the nodes are the partition's — the job's own come from its allocation
        (``SLURM_JOB_NODELIST``) when it starts."""
        return LaunchTarget(
            nodes=nodes,
            node_share_root=self.share_path,
            mount_root=posixpath.dirname(self.share_path),
            temp_root=self.temp_root,
            python=self.python,
            mpirun="mpirun",
            ssh_command=None,
            env=dict(self.env),
            num_gpus=int(spec.extra.get("gpus_per_node", self.gpus_per_node) or 0),
        )

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> Runner:
        """The login node (jobs start through sbatch there, never directly on a compute node)."""
        return BorrowedRunner(self.runner)

    def scheduler(self, spec: ClusterSpec, *, nodes: tuple[Node, ...] | None = None) -> SlurmScheduler:
        """The cluster's scheduler: Slurm itself (sbatch, scancel, squeue)."""
        from .scheduler import SlurmScheduler

        return SlurmScheduler(self, spec)

    def close(self) -> None:
        self.runner.close()


def check_mount_paths(runner: Runner, spec: ClusterSpec, mount_root: str) -> None:
    """Each of the cluster's mounts must be a folder at ``<mount_root>/<relative_mount_path>`` as the login
    node sees it (on Slurm, storage is the site's: an exported path every node mounts); NodeError naming the
    login node and the paths missing."""
    paths = [posixpath.join(mount_root, m.relative_mount_path) for m in spec.mounts]
    if not paths:
        return
    script = "; ".join(f"[ -d {shlex.quote(p)} ] || echo {shlex.quote(p)}" for p in paths)
    result = runner.run(script, timeout=60)
    missing = [line for line in result.stdout.splitlines() if line in paths]
    if missing or not result.ok:
        why = ", ".join(missing) if missing else result.describe()
        raise NodeError(
            f"checking the mounts of cluster {spec.name!r} (on Slurm the site mounts storage: ask its admins "
            f"to export it at these paths on every node)",
            {runner.node: f"not there: {why}"},
            [],
        )
