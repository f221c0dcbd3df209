"""A pre-started MPI world: the queue head's mpirun and rank shims, started while the nodes are busy.

On the local backend every node is this host, so the world a queued job needs (its mpirun line, less
the job's own paths and exported names, and its hostfile, ``localhost slots=N``) is known before any node
is free. The scheduler tells its spare launcher which job heads the queue (scheduler/spares.py); the
spare starts that world: mpirun with shims (``rank --world SOCKET``) that load what a rank needs and wait
on the spare's Unix socket. When the spare is handed a job, the launcher checks that the job fits the
world and that every shim still waits; only then does each shim get the job (its launch config, the
launcher's environment, its working folder and output files) and run it as a shim started by the job's
own mpirun would, under the world's MPI environment (its PMIx server). A hand-off then pays no mpirun
and no Python start-up.

The world carries the spare's tag, which becomes the attempt's: reaping by tag covers it like any job
process. A world that is not used ends: its spare is let go or finds that its job does not fit (the
shims' connections are closed, they exit, mpirun with them; its group is killed after a grace), or its
spare dies (the socket closes under the shims). A job is handed to the world only when every shim is
connected and alive (not exited, not stopped: a SIGSTOPped shim holds its connection but would never run
its rank), so a job never runs in part, or both in the world and in an mpirun of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..common import hostfile_text, job_env, load
from ..policy.toolkits import hostfile_slots
from ..protocol.launch import LaunchConfig

READY_WAIT = 10.0  # the longest a hand-off waits for a world still starting before it starts its own
END_GRACE = 1.0
SOCKET = "world.sock"
MPIRUN_LOG = "mpirun.log"  # mpirun's own output; appended to the job's stderr.txt once it ends

# what mpirun itself reads from its environment: a job whose values differ gets a world of its own
MPI_PREFIXES = ("OMPI_", "OPAL_", "PMIX_", "PRTE_", "HWLOC_")
MPI_NAMES = ("PATH", "LD_LIBRARY_PATH", "TMPDIR")


def mpirun_env(cfg: LaunchConfig) -> dict[str, str]:
    """The variables of the job's environment that mpirun reads (its launcher gives them to mpirun)."""
    env = job_env(cfg)
    return {k: v for k, v in sorted(env.items()) if k.startswith(MPI_PREFIXES) or k in MPI_NAMES}


@dataclass(frozen=True)
class Shape:
    """What a job's world is made of, none of it naming the job: a job of the same shape fits the world."""

    mpirun: str
    count: str  # ``-np``
    hosts: str  # the hostfile's text
    shim: tuple[str, ...]  # the rank shim's command, less the job's launch.json
    options: tuple[str, ...]  # mpirun's options, less the job's exported names (``-x NAME``)
    env: tuple[str, ...]  # ``NAME=value`` of what mpirun reads from the job's environment

    def argv(self, hostfile: str, sock: str) -> list[str]:
        """mpirun with shims that wait on ``sock`` for their job."""
        head = [self.mpirun, "-np", self.count, "--hostfile", hostfile]
        return [*head, *self.options, *self.shim, "--world", sock]


def shape(cfg: LaunchConfig, nodes: list[dict[str, Any]]) -> Shape | None:
    """What the job's world is made of: mpirun, its options, the shim's command and the hostfile, none
    of them naming the job; None where a job cannot have a pre-started world (a custom toolkit, nodes
    over ssh, an mpirun line not of launch.mpirun_argv's form)."""
    argv = [str(a) for a in cfg.get("mpirun_argv") or []]
    if cfg.get("toolkit") == "custom" or cfg.get("ssh_command") is not None or len(argv) < 10:
        return None
    if argv[1] != "-np" or argv[3] != "--hostfile" or argv[-2] != "rank":
        return None
    options: list[str] = []
    rest = argv[5:-5]
    i = 0
    while i < len(rest):
        if rest[i] == "-x":  # the job's exported names: the shims get the launcher's environment whole
            i += 2
            continue
        options.append(rest[i])
        i += 1
    ranks = [int(n) for n in cfg["ranks_per_node"]]
    hosts = hostfile_text(nodes, hostfile_slots(str(cfg["toolkit"]), ranks))
    env = [f"{k}={v}" for k, v in mpirun_env(cfg).items()]
    return Shape(argv[0], argv[2], hosts, tuple(argv[-5:-1]), tuple(options), tuple(env))


class World:
    """mpirun and its waiting shims, held by the spare launcher that started them."""

    def __init__(self, found: Shape, folder: str, env: dict[str, str]) -> None:
        """Start mpirun for ``found`` with ``env`` (the spare's, plus the job's ``mpirun_env``)."""
        self.shape = found
        self.folder = folder
        self.size = int(found.count)
        self.conns: list[socket.socket] = []
        os.makedirs(folder, mode=0o700, exist_ok=True)
        hostfile = os.path.join(folder, "hostfile")
        with open(hostfile, "w", encoding="utf-8") as f:
            f.write(found.hosts)
        sock = os.path.join(folder, SOCKET)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _at(sock, self.listener.bind)
        self.listener.listen(self.size + 4)
        with open(os.path.join(folder, MPIRUN_LOG), "ab") as log:
            self.proc = subprocess.Popen(
                found.argv(hostfile, sock),
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def fits(self, cfg: LaunchConfig, nodes: list[dict[str, Any]]) -> bool:
        return shape(cfg, nodes) == self.shape and self.proc.poll() is None

    def ready(self, stop: Callable[[], bool], timeout: float = READY_WAIT) -> bool:
        """Whether every shim is connected and still waits (a shim that ended closed its connection);
        waits for a world still starting, up to ``timeout`` or until ``stop()``."""
        deadline = time.monotonic() + timeout
        self.listener.settimeout(0.05)
        while len(self.conns) < self.size:
            if self.proc.poll() is not None or time.monotonic() > deadline or stop():
                return False
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            if _peer_uid(conn) != os.getuid():  # only our own processes are shims
                conn.close()
                continue
            self.conns.append(conn)
        readable, _, _ = select.select(self.conns, [], [], 0)
        if readable or self.proc.poll() is not None:  # a waiting shim never writes: readable is EOF
            return False
        # a stopped shim (SIGSTOP, a debugger) keeps its connection open but would never run its rank
        return not any(_stopped(_peer_pid(conn)) for conn in self.conns)

    def go(self, job: dict[str, Any]) -> None:
        """Hand every shim the job: ``config`` (its launch.json), ``env``, ``wd``, ``stdout``, ``stderr``."""
        line = json.dumps(job).encode() + b"\n"
        for conn in self.conns:
            with contextlib.suppress(OSError):  # a shim that died just now: mpirun reports its rank
                conn.sendall(line)
            conn.close()
        self.conns = []
        self.listener.close()

    def mpirun_output(self) -> bytes:
        try:
            with open(os.path.join(self.folder, MPIRUN_LOG), "rb") as f:
                return f.read()
        except OSError:
            return b""

    def end(self, *, wait: bool = True) -> None:
        """Stop the world unused: the shims' connections close (they exit, mpirun with them); whatever
        is left after a grace is killed; its folder goes. ``wait=False`` (a spare let go, its scheduler
        perhaps killed): mpirun's group gets SIGTERM at once and the spare exits without waiting, so that
        a scheduler restarting now seldom finds it (one that does takes it for the job's launcher, and
        queues the job again once it exits without having begun it: attempt_end.NOT_STARTED)."""
        for conn in self.conns:
            conn.close()
        self.conns = []
        self.listener.close()
        if not wait:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            self.remove()
            return
        try:
            self.proc.wait(timeout=END_GRACE)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=END_GRACE)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.remove()

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _at(path: str, call: Callable[[str], None]) -> None:
    """``call`` (bind, connect) with ``path`` by its short name from its folder: AF_UNIX paths are capped
    at 108 bytes, and a scheduler's folder under a deep temp root is longer. Called while no other
    thread of the process runs, so the working folder is changed back before anything else reads it."""
    here = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
        call(os.path.basename(path))
    finally:
        os.chdir(here)


def _peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[0])


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped, traced, a zombie or gone (``/proc/PID/stat``'s state)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"T", b"t", b"Z", b"X")


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[2])


def start(request: dict[str, Any], env: dict[str, str]) -> World | None:
    """The world for the queue head the scheduler named (``launch``: its launch.json, ``nodes``: the
    cluster's, ``folder``: where the world keeps its socket, hostfile and mpirun's output)."""
    try:
        cfg: LaunchConfig = load(str(request["launch"]))
        nodes = list(request["nodes"])[: int(cfg["node_count"])]
        found = shape(cfg, nodes)
        if found is None:
            return None
        return World(found, str(request["folder"]), {**env, **mpirun_env(cfg)})
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no world: the job's own mpirun starts it, as without one


def serve_rank(sock: str) -> int:
    """In a shim of a pre-started world: wait for the job, then be its rank shim (``rank.run_rank``)."""
    from . import rank  # loaded now, not in the hand-off

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _at(sock, conn.connect)
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(1 << 20)
            if not chunk:
                return 0  # let go before a job came: nothing ran here
            data += chunk
    except OSError:
        return 0
    finally:
        conn.close()
    job = json.loads(data)
    os.environ.update(job["env"])  # the launcher's environment, over the world's MPI variables
    os.chdir(job["wd"])
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.dup2(out, fd)
        os.close(out)
    return rank.run_rank(job["config"])
