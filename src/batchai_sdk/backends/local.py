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
from pathlib import Path
from typing import Any

from .._models import ClusterSpec, Node
from ..remote.local import LocalRunner
from ..share import LocalShare
from .base import Backend, ClusterStatus, LaunchTarget

# job preparation that installs system or Python packages
INSTALLS = re.compile(r"\b(apt|apt-get|yum|dnf|zypper|apk|pip|pip3|conda|mamba|uv)\b[^;&|\n]*\binstall\b")


def default_root() -> Path:
    return Path(os.environ.get("BATCHAI_HOME", "~/.batchai")).expanduser()


class LocalBackend(Backend):
    kind = "local"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        name: str = "local",
        allow_host_changes: bool | None = None,
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
        self.hostname = socket.gethostname().split(".")[0] or "localhost"

    def guard_host(self, config: dict[str, Any]) -> list[str]:
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
        return None

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        return ClusterStatus(resizing=False, nodes=self._nodes(spec.nodes))

    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        return None

    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        python = sys.executable
        bindir = str(Path(python).parent)
        path = os.environ.get("PATH", "")
        # The venv's bin first, so mpirun/horovodrun from a pip-installed MPI and the venv's python win.
        env = {"PATH": f"{bindir}:{path}" if bindir not in path.split(":") else path}
        return LaunchTarget(
            nodes=nodes,
            node_share_root=str(self.share.root),
            mount_root=str(self.mount_root),
            temp_root=str(self.temp_root),
            python=python,
            mpirun=shutil.which("mpirun", path=env["PATH"]) or "mpirun",
            ssh_command=None,
            mpi_args=("--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"),
            env=env,
            num_gpus=0,
            oversubscribe=True,
        )

    def delete(self) -> None:
        """Remove the share and temp folders this backend made under ``root`` (never other files)."""
        for made in (self.mount_root, self.temp_root):
            shutil.rmtree(made, ignore_errors=True)
        try:
            self.root.rmdir()
        except OSError:
            pass

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LocalRunner:
        return LocalRunner(nodes[0].id if nodes else "localhost")
