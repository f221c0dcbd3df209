"""Test nodes that really are separate machines: each node has its own network, PID, UTS and mount
namespace, so its own address, hostname, ``/proc``, private ``/tmp`` and ``sshd`` on port 22.

The loopback nodes of ``tests/ssh/sshd.py`` share one ``/proc``, one network stack and one hostname: a
process left on another node cannot be told apart, and a node cannot lose its network or its power.
Here a node can: ``partition()`` takes its link down, ``block(other)`` drops its traffic to one other
node (a blackhole route, since this machine has no iptables/netem), ``power_off()`` kills its PID 1
(the kernel then kills everything in it) and takes its link down.

Layout, all made by the fixture and removed by it (also the leftovers of a run that died):

* a bridge in this machine's network namespace with the client's address ``.1`` of a /27 slot of
  198.51.100.0/24 (TEST-NET-2: not this machine's network, which is 192.0.2.0/24); nodes take ``.2``,
  ``.3``, ...; no default route anywhere, and forwarding stays off, so nothing leaves the namespaces;
* per node a named network namespace with one end of a veth pair (``eth0``) and ``lo``; in it
  ``unshare --pid --fork --mount-proc --uts --mount`` runs a small init (``python3 -S``) as PID 1 that
  sets the hostname, mounts a private tmpfs on ``/tmp``, binds the shared folder back at its own path
  (the test session's temp folder: the share, scripts and client files, as an NFS home would be), and
  so the checkout and its venv when they lie under ``/tmp`` (``visible_folders``), binds an
  ``/etc/hosts`` naming every node, starts ``sshd`` and reaps orphans.

A slot (its addresses and names) is taken with a lock file, so two test runs at once never share one
and a run that died is cleaned up by the next one that takes its slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
LOCK_DIR = Path("/run/batchai-nsnodes")
NET = "198.51.100"  # TEST-NET-2 (RFC 5737)
SLOT_SIZE = 32  # a /27 per slot: 8 slots, up to 29 nodes each
SLOTS = 256 // SLOT_SIZE
NODE_STATE_DIR = "/tmp/batchai-node"  # private to each node (its own /tmp)

# PID 1 of a node. argv: hostname, hosts file, sshd config, sshd log, then the folders it keeps visible
# under its private /tmp (the shared folder, and the checkout and its venv where they lie under /tmp).
INIT = r"""
import ctypes, os, signal, socket, subprocess, sys, time
hostname, hosts, config, log = sys.argv[1:5]
keep = sys.argv[5:]
libc = ctypes.CDLL(None, use_errno=True)
MS_BIND, MS_REC = 4096, 16384
def mount(source, target, fstype, flags, data=None):
    if libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                  data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")
socket.sethostname(hostname)
mount(hosts, "/etc/hosts", None, MS_BIND)
held = [os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep]  # reachable once /tmp is covered
mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777")
for path, fd in zip(keep, held):
    os.makedirs(path, exist_ok=True)
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)  # the folder under the tmpfs
    os.close(fd)
os.chdir("/")
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # PID 1 ignores signals it does not handle
with open(log, "ab") as out:
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", config], stdout=out, stderr=out)
while True:  # reap every orphan of the node, as an init does
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


class NodesUnavailable(Exception):
    """Namespaces, veth pairs or sshd cannot be had on this machine: the reason to skip."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


def host_addresses() -> set[str]:
    """Every IPv4 address and route destination this machine already has."""
    found = set()
    for line in _ip("-o", "-4", "addr").stdout.splitlines() + _ip("-4", "route").stdout.splitlines():
        for word in line.split():
            found.add(word.split("/")[0])
    return found


def skip_reason() -> str | None:
    if sys.platform != "linux":
        return "namespace nodes need Linux"
    if os.geteuid() != 0:
        return "namespace nodes need root (ip netns, unshare, sshd)"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux)"
    if not (os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN)):
        return "OpenSSH's sshd is not installed (apt-get install openssh-server)"
    return None


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )


@dataclass
class NSNode:
    """One node: ``name`` is its hostname, ``address`` its only address."""

    cluster: NSNodes
    name: str
    address: str
    netns: str
    link: str  # this machine's end of the node's veth pair, on the bridge
    unshare: subprocess.Popen[bytes] | None = None
    init_pid: int | None = None  # the node's PID 1, as this machine numbers it

    @property
    def directory(self) -> Path:
        return self.cluster.directory / self.name

    @property
    def host_key(self) -> Path:
        return self.directory / "host_key"

    def host_key_line(self, port: int = 22) -> str:
        keytype, b64 = Path(f"{self.host_key}.pub").read_text().split()[:2]
        name = self.address if port == 22 else f"[{self.address}]:{port}"
        return f"{name} {keytype} {b64}\n"

    # -- life -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Power on: PID 1 and sshd in fresh PID/UTS/mount namespaces in the node's network namespace."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.host_key.exists():
            _keygen(self.host_key, f"host-{self.name}")
        config = self.directory / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    "ListenAddress 0.0.0.0:22",
                    f"HostKey {self.host_key}",
                    "PidFile none",
                    f"AuthorizedKeysFile {self.cluster.authorized_keys}",
                    "UsePAM no",
                    "PermitRootLogin yes",
                    "StrictModes no",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "AcceptEnv LANG LC_* OMPI_* BATCHAI_*",
                    "Subsystem sftp internal-sftp",
                    "MaxStartups 200:30:400",
                    "MaxSessions 200",
                    "UseDNS no",
                    "LogLevel ERROR",
                    "",
                ]
            )
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege separation directory
        self.link_up()
        argv = [
            "nsenter", f"--net=/run/netns/{self.netns}", "--",
            "unshare", "--pid", "--fork", "--mount-proc", "--uts", "--mount", "--propagation", "private", "--",
            sys.executable, "-S", str(self.cluster.init_script), self.name, str(self.cluster.hosts_file),
            str(config), str(self.directory / "sshd.log"), *map(str, self.cluster.visible),
        ]  # fmt: skip
        # nsenter joins only the network namespace: unlike `ip netns exec` it keeps this machine's /sys
        # and its cgroup mounts, which slurmd needs
        with (self.directory / "init.log").open("ab") as log:  # never the test's own stdout: it outlives us
            self.unshare = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + 20
        while self.init_pid is None:
            children = _children(self.unshare.pid)
            if children:
                self.init_pid = children[0]
            elif self.unshare.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"node {self.name} did not start (unshare exited {self.unshare.returncode})"
                )
            else:
                time.sleep(0.01)
        self.wait_for_sshd(deadline)

    def wait_for_sshd(self, deadline: float) -> None:
        while True:
            try:
                with socket.create_connection((self.address, 22), timeout=1) as s:
                    if s.recv(16).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                log = (self.directory / "sshd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"sshd on node {self.name} ({self.address}) did not start: {log}")
            time.sleep(0.02)

    def power_off(self) -> None:
        """Pull the plug: the link goes down and PID 1 is killed, and with it everything on the node."""
        self.link_down()
        self._kill()

    def power_on(self) -> None:
        self._kill()
        self.start()

    def _kill(self) -> None:
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            self.init_pid = None
        if self.unshare is not None:
            with contextlib.suppress(ProcessLookupError):
                self.unshare.kill()
            self.unshare.wait()
            self.unshare = None

    @property
    def running(self) -> bool:
        return self.init_pid is not None and _alive(self.init_pid)

    # -- network ----------------------------------------------------------------------------------
    def link_down(self) -> None:
        """A partition: the node reaches no one and no one reaches it."""
        _ip("link", "set", self.link, "down")

    def link_up(self) -> None:
        _ip("link", "set", self.link, "up")

    partition = link_down
    heal = link_up

    def block(self, other: NSNode) -> None:
        """Drop every packet from this node to ``other`` (a one-sided route that breaks TCP both ways)."""
        _ip("-n", self.netns, "route", "replace", "blackhole", f"{other.address}/32")

    def unblock(self, other: NSNode) -> None:
        _ip("-n", self.netns, "route", "del", "blackhole", f"{other.address}/32", check=False)

    # -- looking inside -----------------------------------------------------------------------------
    @property
    def proc(self) -> Path:
        """The node's own ``/proc`` (its PIDs, its processes only), seen from this machine."""
        assert self.init_pid is not None, f"node {self.name} is off"
        return Path(f"/proc/{self.init_pid}/root/proc")

    def processes(self) -> dict[int, str]:
        """pid (as the node numbers it) → command line, of every process on the node."""
        return {pid: " ".join(argv) for pid, argv in self.argvs().items()}

    def argvs(self) -> dict[int, list[str]]:
        """pid (as the node numbers it) → its arguments as given (a path with a space stays one)."""
        out = {}
        for entry in os.listdir(self.proc):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    raw = (self.proc / entry / "cmdline").read_bytes()
                    out[int(entry)] = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        return out

    def tagged(self, tag: str) -> dict[int, str]:
        """The processes of the job tagged ``tag`` on this node (pid → command line), from its own /proc."""
        needle = f"BATCHAI_JOB_TAG={tag}".encode()
        found = {}
        for pid, cmd in self.processes().items():
            try:
                environ = (self.proc / str(pid) / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if needle in environ:
                found[pid] = cmd
        return found

    def leftovers(self) -> list[str]:
        """Anything on the node but its init, sshd, a cluster's scheduler, the spare launcher it keeps
        ready (``launch -``, scheduler/spares.py), the node agent it keeps there (``agent NAME``, with
        its ssh session on the head node: node/agent/), the head's standby there (``standby``,
        ``standby-watch``: node/scheduler/standby.py) and its shared SSH connections (the ControlMaster
        an SSH cluster keeps to each node for a while by design, node_setup.MUX_DIR): what jobs left."""
        return [
            f"{pid} {' '.join(argv)[:100]}"
            for pid, argv in self.argvs().items()
            if pid != 1
            and argv
            and not argv[0].startswith("sshd")
            and argv[3:4] != ["scheduler"]
            and argv[3:] != ["launch", "-"]
            and argv[3:4] not in (["agent"], ["standby"], ["standby-watch"])
            and not (argv[0] == "ssh" and " ".join(argv).split()[-2:-1] in (["agent"], ["standby"]))
            and not _ssh_mux(" ".join(argv))
        ]

    def host_pid(self, pid: int) -> int:
        """This machine's number for the node's process ``pid`` (to signal it from here)."""
        for host_pid in self.host_pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
                    if line.startswith("NSpid:") and int(line.split()[-1]) == pid:
                        return host_pid
        raise ProcessLookupError(f"no process {pid} on node {self.name}")

    def parent(self, pid: int) -> int:
        """The parent of the node's process ``pid``, as the node numbers it."""
        stat = (self.proc / str(pid) / "stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])

    def host_pids(self) -> list[int]:
        """The node's processes as this machine numbers them (to signal them from here)."""
        assert self.init_pid is not None
        ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        found.append(int(entry))
        return found

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the node (all its namespaces); stop it with ``terminate``."""
        assert self.init_pid is not None, f"node {self.name} is off"
        enter = ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", "-u", "--"]
        return subprocess.Popen([*enter, *argv], start_new_session=True, **options)

    @staticmethod
    def terminate(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
        """End a process ``popen`` started: SIGTERM to it (nsenter passes no signal on), then SIGKILL."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # nsenter waits for its child and exits with it
            for pid in _children(proc.pid) + ([proc.pid] if sig == signal.SIGKILL else []):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            try:
                proc.wait(timeout=timeout)
                return
            except subprocess.TimeoutExpired:
                continue

    def run(self, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """``command`` on the node (all its namespaces), as its console would run it."""
        assert self.init_pid is not None, f"node {self.name} is off"
        return subprocess.run(
            ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", "-u", "--", "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@dataclass
class NSNodes:
    directory: Path  # keys, configs, logs
    shared: Path  # bind-mounted on every node at the same path
    slot: int
    lock: IO[bytes]
    user: str = "root"
    port: int = 22
    nodes: dict[str, NSNode] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return f"bai{self.slot}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def client_address(self) -> str:
        """This machine's address on the nodes' network (the bridge's)."""
        return f"{NET}.{self.slot * SLOT_SIZE + 1}"

    @property
    def key_file(self) -> Path:
        return self.directory / "client_key"

    @property
    def authorized_keys(self) -> Path:
        return self.directory / "authorized_keys"

    @property
    def init_script(self) -> Path:
        return self.directory / "init.py"

    @property
    def hosts_file(self) -> Path:
        return self.directory / "hosts"

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes.values()]

    @property
    def visible(self) -> list[Path]:
        """The folders every node sees at their own paths despite its private /tmp: the shared folder,
        and this checkout and the Python running the tests (venv and base) where they lie under /tmp
        (a clone under /tmp is where people try things)."""
        return visible_folders(self.shared)

    def __getitem__(self, name: str) -> NSNode:
        return self.nodes[name]

    def by_address(self, address: str) -> NSNode:
        return next(n for n in self.nodes.values() if n.address == address)

    def known_hosts_text(self) -> str:
        return "".join(n.host_key_line() for n in self.nodes.values())

    def heal_all(self) -> None:
        """Every node on, linked, and reaching every other: what each test starts from."""
        for node in self.nodes.values():
            for other in self.nodes.values():
                if other is not node:
                    node.unblock(other)
            if not node.running:
                node.power_on()
            node.link_up()

    def workspace(self, name: str, root: Path, hosts: list[str] | None = None, **options: Any) -> Any:
        """``Workspace.ssh`` on these nodes: the share in ``root/share`` (under the shared folder), the
        client's state in ``root``, each node's own state in its private /tmp, MPI over ``eth0``."""
        from batchai_sdk import Workspace

        assert self.shared in root.parents or root == self.shared, "the share must be in the shared folder"
        (root / "share").mkdir(parents=True, exist_ok=True)
        settings: dict[str, Any] = {
            "share_path": str(root / "share"),
            "state_dir": root / "client_state",
            "node_state_dir": NODE_STATE_DIR,
            "python": sys.executable,
            "tcp_interface": "eth0",
            "connect_timeout": 5.0,
            **options,
        }
        return Workspace.ssh(
            name, hosts=hosts or self.addresses, user=self.user, key_file=self.key_file, port=22,
            trust_on_first_use=True, authorized_keys_path=str(self.authorized_keys), **settings,
        )  # fmt: skip

    def close(self) -> None:
        for node in self.nodes.values():
            node._kill()
        _remove_slot(self.slot)
        self.lock.close()


CHECKOUT = Path(__file__).resolve().parents[1]


def visible_folders(shared: Path) -> list[Path]:
    """``shared``, plus the checkout, ``sys.prefix`` and ``sys.base_prefix`` where under /tmp; none
    inside another (a bind of a folder brings what is under it)."""
    tmp = Path("/tmp").resolve()
    wanted = [Path(shared).resolve()]
    for folder in (CHECKOUT, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()):
        if tmp in folder.parents:
            wanted.append(folder)
    kept: list[Path] = []
    for folder in sorted(set(wanted), key=lambda f: len(f.parts)):
        if not any(k == folder or k in folder.parents for k in kept):
            kept.append(folder)
    return kept


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _remove_slot(slot: int) -> None:
    """Every namespace and link of ``slot``, with whatever still runs in those namespaces."""
    prefix = f"bai{slot}"
    for line in _ip("netns", "list").stdout.splitlines():
        netns = line.split()[0] if line.strip() else ""
        if not netns.startswith(f"{prefix}-"):
            continue
        for pid in _ip("netns", "pids", netns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", netns, check=False)  # its veth end goes with it, and so the pair
    for line in _ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(prefix) and name[len(prefix) :][:1] in ("b", "n"):
            _ip("link", "del", name, check=False)


def _take_slot() -> tuple[int, IO[bytes]]:
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        lock = (LOCK_DIR / f"slot-{slot}.lock").open("wb")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return slot, lock
    raise NodesUnavailable(f"all {SLOTS} node network slots are taken by other test runs")


@contextlib.contextmanager
def start_nodes(
    directory: Path, shared: Path, count: int, *, names: list[str] | None = None
) -> Iterator[NSNodes]:
    """Start ``count`` nodes (``node1``, ``node2``, ... unless ``names``); remove all of it on exit.
    Raises ``NodesUnavailable`` when this machine does not allow it."""
    reason = skip_reason()
    if reason:
        raise NodesUnavailable(reason)
    names = names or [f"node{i + 1}" for i in range(count)]
    slot, lock = _take_slot()
    _remove_slot(slot)  # what a run that died left in this slot
    directory.mkdir(parents=True, exist_ok=True)
    cluster = NSNodes(directory, shared, slot, lock)
    taken = host_addresses()
    try:
        base = slot * SLOT_SIZE
        if cluster.client_address in taken:
            raise NodesUnavailable(f"{cluster.client_address} is already this machine's")
        try:
            _ip("link", "add", cluster.bridge, "type", "bridge")
        except RuntimeError as exc:
            raise NodesUnavailable(f"cannot create a bridge: {exc}") from exc
        _ip("addr", "add", f"{cluster.client_address}/27", "dev", cluster.bridge)
        _ip("link", "set", cluster.bridge, "up")
        hosts = ["127.0.0.1 localhost"]
        for i, name in enumerate(names):
            address = f"{NET}.{base + 2 + i}"
            if address in taken:
                raise NodesUnavailable(f"{address} is already this machine's")
            node = NSNode(cluster, name, address, f"{cluster.prefix}-{name}", f"{cluster.prefix}n{i}")
            try:
                _ip("netns", "add", node.netns)
            except RuntimeError as exc:
                raise NodesUnavailable(f"cannot create a network namespace: {exc}") from exc
            _ip("link", "add", node.link, "type", "veth", "peer", "name", f"{node.link}p")
            _ip("link", "set", f"{node.link}p", "netns", node.netns)
            _ip("-n", node.netns, "link", "set", f"{node.link}p", "name", "eth0")
            _ip("-n", node.netns, "addr", "add", f"{address}/27", "dev", "eth0")
            _ip("-n", node.netns, "link", "set", "eth0", "up")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            _ip("link", "set", node.link, "master", cluster.bridge)
            cluster.nodes[name] = node
            hosts.append(f"{address} {name}")
        cluster.hosts_file.write_text("\n".join(hosts) + "\n")
        cluster.init_script.write_text(INIT)
        _keygen(cluster.key_file, "batchai-test-client")
        cluster.authorized_keys.write_text(Path(f"{cluster.key_file}.pub").read_text())
        for node in cluster.nodes.values():
            node.start()
        yield cluster
    finally:
        cluster.close()


def _ssh_mux(cmd: str) -> bool:
    """A cluster's shared SSH connection: ``ssh: <home>/.batchai-ssh/<cluster>-<hash> [mux]``."""
    from batchai_sdk.backends.ssh.node_setup import MUX_DIR

    words = cmd.split()
    return len(words) == 3 and words[0] == "ssh:" and f"/{MUX_DIR}/" in words[1] and words[2] == "[mux]"
