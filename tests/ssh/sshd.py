"""Real OpenSSH servers on loopback addresses, one per "node": used by the SSH tests and the benchmark.

Each node is its own ``sshd -D -e`` on 127.0.0.N (Linux routes all of 127/8 to lo), with its own host
key, all on one non-default port, all accepting one client key through a temporary authorized_keys
file (so /root/.ssh is never touched).
"""

from __future__ import annotations

import getpass
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchai_sdk import Workspace

SSHD = "/usr/sbin/sshd"
NODE_ADDRESSES = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
DEAD_ADDRESS = "127.0.0.9"  # nothing listens there
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN)


def keygen(path: Path, comment: str = "batchai-test") -> Path:
    path.unlink(missing_ok=True)
    Path(f"{path}.pub").unlink(missing_ok=True)
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def _port_free(address: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def free_port(addresses: list[str]) -> int:
    """A port free on every address (the backend uses one port for all nodes)."""
    for _ in range(200):
        port = random.randint(20000, 40000)
        if all(_port_free(a, port) for a in addresses):
            return port
    raise RuntimeError("no free port")


def wait_for_banner(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as s:
                if s.recv(16).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"sshd on {address}:{port} did not start")


@dataclass
class SSHNode:
    address: str
    port: int
    directory: Path
    authorized_keys: Path
    home: Path | None = None  # the sessions' HOME (its shell start-up files), else the user's own
    process: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()  # more sshd_config lines (``AllowStreamLocalForwarding no``: no agent)

    @property
    def host_key(self) -> Path:
        return self.directory / f"host_key_{self.address}"

    @property
    def tmpdir(self) -> Path:
        """The node's own temporary folder (TMPDIR), as a machine of its own has /tmp."""
        return self.directory / f"tmp_{self.address}"

    @property
    def config(self) -> Path:
        return self.directory / f"sshd_config_{self.address}"

    def host_key_line(self) -> str:
        """The node's known_hosts line, as the backend's store spells it."""
        keytype, b64 = Path(f"{self.host_key}.pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {keytype} {b64}\n"

    def write_config(self) -> None:
        self.config.write_text(
            "\n".join(
                [
                    f"ListenAddress {self.address}:{self.port}",
                    f"HostKey {self.host_key}",
                    f"PidFile {self.directory / f'sshd_{self.address}.pid'}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    "UsePAM no",
                    "PermitRootLogin yes",
                    "StrictModes no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitUserEnvironment no",
                    "AcceptEnv LANG LC_* OMPI_* BATCHAI_*",
                    "Subsystem sftp internal-sftp",
                    # mpirun and parallel tests open many sessions at once
                    "MaxStartups 200:30:400",
                    "MaxSessions 200",
                    "LogLevel ERROR",
                    f"SetEnv TMPDIR={self.tmpdir}" + (f" HOME={self.home}" if self.home else ""),
                    *self.extra,
                    "",
                ]
            )
        )

    def start(self, *, new_host_key: bool = False) -> None:
        if new_host_key or not self.host_key.exists():
            keygen(self.host_key, f"host-{self.address}")
        self.tmpdir.mkdir(mode=0o1777, exist_ok=True)
        self.write_config()
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation directory
        log = (self.directory / f"sshd_{self.address}.log").open("ab")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        try:
            wait_for_banner(self.address, self.port)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self, *, new_host_key: bool = False) -> None:
        self.stop()
        self.start(new_host_key=new_host_key)


@dataclass
class SSHNodes:
    """A set of sshd nodes that accept ``key_file`` for ``user``."""

    directory: Path
    port: int
    user: str
    key_file: Path
    authorized_keys: Path
    home: Path | None = None
    nodes: dict[str, SSHNode] = field(default_factory=dict)

    @property
    def addresses(self) -> list[str]:
        return list(self.nodes)

    def known_hosts_text(self, addresses: list[str] | None = None) -> str:
        return "".join(self.nodes[a].host_key_line() for a in (addresses or self.addresses))

    def workspace(self, name: str, root: Path, hosts: list[str], **options: Any) -> Workspace:
        """``Workspace.ssh`` on these nodes with everything in ``root``: the share (``root/mnt/share``
        unless ``share_path`` is given), the client's and the nodes' state, trust on first use; the
        nodes run this Python and MPI talks over loopback. ``options`` go to ``Workspace.ssh`` too."""
        settings: dict[str, Any] = {
            "share_path": str(root / "mnt" / "share"),
            "state_dir": root / "client_state",
            "node_state_dir": str(root / "node_state"),
            "python": sys.executable,
            "tcp_interface": "lo",
            "connect_timeout": 5.0,
            **options,
        }
        Path(settings["share_path"]).mkdir(parents=True, exist_ok=True)  # the mount every node sees
        return Workspace.ssh(
            name, hosts=hosts, user=self.user, key_file=self.key_file, port=self.port,
            trust_on_first_use=True, authorized_keys_path=str(self.authorized_keys), **settings,
        )  # fmt: skip

    def add(self, address: str) -> SSHNode:
        node = SSHNode(address, self.port, self.directory, self.authorized_keys, self.home)
        node.start()
        self.nodes[address] = node
        return node

    def remove(self, address: str) -> None:
        node = self.nodes.pop(address, None)
        if node is not None:
            node.stop()

    def close(self) -> None:
        for node in self.nodes.values():
            node.stop()
        self.nodes.clear()

    def __enter__(self) -> SSHNodes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_nodes(
    directory: Path, addresses: list[str], *, port: int | None = None, home: Path | None = None
) -> SSHNodes:
    """Start one sshd per address; the caller closes them (``with start_nodes(...) as nodes:``).
    ``home``: the sessions' HOME instead of the user's, so their shell reads its start-up files."""
    directory.mkdir(parents=True, exist_ok=True)
    key = keygen(directory / "client_key", "batchai-test-client")
    authorized = directory / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    nodes = SSHNodes(directory, port or free_port(addresses), getpass.getuser(), key, authorized, home)
    try:
        for address in addresses:
            nodes.add(address)
    except BaseException:
        nodes.close()
        raise
    return nodes
