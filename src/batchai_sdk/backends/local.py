"""The embedded default backend: this machine is the cluster, a directory is the share.

A local cluster of N nodes is N slots of this machine; job preparation therefore runs once, ranks run
with ``--oversubscribe`` when there are more than cores. It is a real backend, not a mock: the same wrapper,
mpirun line and share layout as the SSH and Azure backends.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._models import ClusterSpec, Node
from ..mounts import Mount, storage_key
from ..node.protocol.launch import LaunchConfig
from ..remote.local import LocalRunner
from ..share import LocalShare
from .base import Backend, ClusterStatus, LaunchTarget

# job preparation that installs system or Python packages
INSTALLS = re.compile(r"\b(apt|apt-get|yum|dnf|zypper|apk|pip|pip3|conda|mamba|uv)\b[^;&|\n]*\binstall\b")


def default_root() -> Path:
    return Path(os.environ.get("BATCHAI_HOME", "~/.batchai")).expanduser()


class LocalBackend(Backend):
    kind = "local"
    starts_scheduler_with_cluster = True

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        name: str = "local",
        allow_host_changes: bool | None = None,
        storage_root: str | os.PathLike[str] | None = None,
    ) -> None:
        if allow_host_changes is None:
            allow_host_changes = os.environ.get("BATCHAI_LOCAL_ALLOW_HOST_CHANGES", "") in (
                "1",
                "true",
                "yes",
            )
        self.allow_host_changes = allow_host_changes
        self.root = Path(root).expanduser().resolve() if root is not None else default_root().resolve()
        self.workspace = name
        self.root.mkdir(parents=True, exist_ok=True)
        self.mount_root = self.root / "mounts"
        self.share: LocalShare = LocalShare(self.mount_root / "share", name="share")
        self.temp_root = self.root / "tmp"
        # each storage a mount names: storage/<mounts.storage_key>; the CLI's workspaces share one root
        # ($BATCHAI_HOME/storage), so an (account, share) is one folder wherever it is named
        self.storage_root = (
            Path(storage_root).expanduser().resolve() if storage_root is not None else self.root / "storage"
        )
        self.hostname = socket.gethostname().split(".")[0] or "localhost"

    def guard_host(self, config: LaunchConfig) -> list[str]:
        """A job.json written for cluster nodes (the tutorial's installs packages with apt and pip, and runs
        in a Docker image) must not change the user's own computer unasked."""
        if self.allow_host_changes:
            return []
        notes = []
        how = "allow it: Workspace.local(..., allow_host_changes=True) or BATCHAI_LOCAL_ALLOW_HOST_CHANGES=1"
        prep = config.get("job_preparation")
        if prep and INSTALLS.search(prep):
            config["job_preparation"] = None
            notes.append(
                f"job preparation skipped: {prep!r} would install packages on this computer (the local "
                f"backend's nodes are this machine); {how}"
            )
        image = config.get("container_image")
        if image:
            config["container_image"] = None
            notes.append(
                f"containerSettings skipped: image {image} would be pulled and run on this computer; {how}"
            )
        return notes

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "root": str(self.root), "share_path": str(self.share.root)}

    def _nodes(self, count: int) -> tuple[Node, ...]:
        return tuple(
            Node(id=f"{self.hostname}_{i}", address="localhost", machine=self.hostname) for i in range(count)
        )

    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        return None

    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        return None

    def delete_cluster(self, spec: ClusterSpec) -> None:
        """The cluster's mount root holds only links: it goes; the storage they lead to stays."""
        shutil.rmtree(self.root / "clusters" / spec.name, ignore_errors=True)

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        return ClusterStatus(resizing=False, nodes=self._nodes(spec.nodes))

    def cluster_mount_root(self, spec: ClusterSpec) -> Path:
        """The cluster's ``AZ_BATCHAI_MOUNT_ROOT``: the workspace share and each mount, as links, and the
        folders of mounts it does not declare."""
        return self.root / "clusters" / spec.name / "mounts"

    def storage(self, mount: Mount) -> LocalShare:
        """The folder that stands for the storage ``mount`` names (made if missing)."""
        path = self.storage_root / storage_key(mount)
        path.mkdir(parents=True, exist_ok=True)
        return LocalShare(path, name=mount.relative_mount_path)

    def storage_exists(self, mount: Mount) -> bool | None:
        """Whether the storage ``mount`` names was made (``batchai storage share create``,
        ``ws.storage(mount)``, an earlier job or cluster naming it): its folder exists."""
        return (self.storage_root / storage_key(mount)).is_dir()

    def names_workspace_share(self, mount: Mount) -> bool | None:
        """Whether ``mount`` names this workspace's own share (its storage folder is a link to it)."""
        path = self.storage_root / storage_key(mount)
        return path.is_symlink() and path.resolve() == self.share.root.resolve()

    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """The cluster's mount root: ``<share name>`` and each mount's ``relative_mount_path`` linked to
        their folders, so two clusters (or jobs) naming the same storage see the same files."""
        root = self.cluster_mount_root(spec)
        root.mkdir(parents=True, exist_ok=True)
        links = {self.share.name: self.share.root}
        links.update({m.relative_mount_path: self.storage(m).root for m in spec.mounts})
        for name, target in links.items():
            _link(root / name, target)

    def prepare_job_mounts(self, spec: ClusterSpec, nodes: tuple[Node, ...], mounts: Sequence[Mount]) -> None:
        for mount in mounts:
            self.storage(mount)

    def undeclared_mounts(self, spec: ClusterSpec, named: Mapping[str, str]) -> list[str]:
        """A job file written for a Batch AI cluster runs here unchanged: each mount it names that the
        cluster does not declare is a folder under the cluster's mount root (a link to a folder of the
        storage root, so what jobs write there outlives the cluster, as storage did on Batch AI)."""
        notes = []
        for name in named:
            folder = self.cluster_mount_root(spec) / name
            target = self.root / "storage" / "undeclared" / spec.name / name
            target.mkdir(parents=True, exist_ok=True)
            folder.parent.mkdir(parents=True, exist_ok=True)
            _link(folder, target)
            notes.append(
                f"$AZ_BATCHAI_MOUNT_ROOT/{name} is not a mount of cluster {spec.name!r}; on the local "
                f"backend it is the folder {folder}"
                " (declare it in create_cluster(mounts=...) to name its storage)"
            )
        return notes

    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        python = sys.executable
        bindir = str(Path(python).parent)
        path = os.environ.get("PATH", "")
        # The venv's bin first, so mpirun/horovodrun from a pip-installed MPI and the venv's python win.
        env = {"PATH": f"{bindir}:{path}" if bindir not in path.split(":") else path}
        return LaunchTarget(
            nodes=nodes,
            node_share_root=str(self.share.root),
            mount_root=str(self.cluster_mount_root(spec)),
            temp_root=str(self.temp_root),
            python=python,
            mpirun=shutil.which("mpirun", path=env["PATH"]) or "mpirun",
            ssh_command=None,
            mpi_args=("--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"),
            env=env,
            num_gpus=0,
            oversubscribe=True,
            storage_root=str(self.storage_root),
        )

    def delete(self) -> None:
        """Remove the share, storage and temp folders this backend made under ``root`` (never other files)."""
        # a storage root outside ``root`` (the CLI's, shared by its workspaces) outlives the workspace, and
        # so does $BATCHAI_HOME/storage when this is the default workspace kept in $BATCHAI_HOME itself
        shared = self.root == default_root().resolve()
        storage = self.root / "storage" / "undeclared" if shared else self.root / "storage"
        for made in (self.mount_root, self.temp_root, storage, self.root / "clusters"):
            shutil.rmtree(made, ignore_errors=True)
        try:
            self.root.rmdir()
        except OSError:
            pass

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LocalRunner:
        return LocalRunner(nodes[0].id if nodes else "localhost")


def _link(path: Path, target: Path) -> None:
    """``path`` → ``target`` as a symlink, replacing a link to elsewhere; a real folder is left alone."""
    if path.is_symlink():
        if os.readlink(path) == str(target):
            return
        path.unlink()
    elif path.exists():
        return
    try:
        path.symlink_to(target, target_is_directory=True)
    except FileExistsError:
        pass  # another submit made it at the same moment
