"""Head-node side of the node agent: one request through the forwarded socket of a node's agent.

The scheduler keeps each node's agent and forwards ``~/.batchai-ssh/fwd-<name>.sock`` here to the
agent's socket there over the kept SSH connection (keeper.py); the launcher and the scheduler's cleanup
connect to it. ``Unavailable`` means nothing was done there (no agent, no greeting, or a refusal that
says so: another copy of the node code, an agent that is stopping): the caller uses SSH as before. A
connection lost after the request went out raises ``Lost``: the request may have run, so it is not
repeated over SSH (a rank shim must never start twice). While a rank shim runs its agent sends a beat;
a connection silent for ``SILENT_BEATS`` beats counts as lost the same way (an agent that is stopped, or
whose node or forward stalls, would otherwise hold its launcher until the job's hang timeout).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shlex
import signal
import socket
import subprocess
import time
from typing import Any

from ..common import TAG_VAR
from ..protocol.cluster import ClusterConfig

SOCKET_DIR = ".batchai-ssh"  # in the home folder, 0700 (node setup makes it; so does the agent)
SAFE_REFUSALS = ("stale", "closing")  # answers that mean the agent did nothing
HEARTBEAT_S = 1.0  # an agent's beat: to the launcher of each running shim, and to the scheduler
SILENT_BEATS = 5  # beats missed in a row before an agent counts as lost
REAP_S = 20.0  # procs.reap takes at most its 5 s grace and 5 s more after SIGKILL


class Unavailable(Exception):
    """No agent took the request: nothing ran; SSH may do it instead."""


class Lost(Exception):
    """The agent's connection ended after the request was sent: it may have run."""


def agent_name(ssh_command: list[str] | tuple[str, ...], address: str) -> str:
    """The name of a node's agent and of its forwarded socket, per cluster (its ssh command names the
    cluster's ssh_config) and node."""
    return hashlib.sha256(json.dumps([list(ssh_command), address]).encode()).hexdigest()[:16]


def forward_path(ssh_command: list[str] | tuple[str, ...], address: str) -> str:
    name = agent_name(ssh_command, address)
    return os.path.join(os.path.expanduser("~"), SOCKET_DIR, f"fwd-{name}.sock")


class Connection:
    """One connection to a node's agent, greeted; ``Unavailable`` when there is none."""

    def __init__(self, ssh_command: list[str], address: str, timeout: float = 5.0) -> None:
        path = forward_path(ssh_command, address)
        if not os.path.exists(path):
            raise Unavailable(f"no agent for {address}")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.buffer = b""
        try:
            self.sock.connect(path)
            # the SSH forward accepts at once, whatever is behind it: only the agent's greeting tells
            greeting = self.receive(timeout)
        except (OSError, Lost) as exc:
            self.close()
            raise Unavailable(f"the agent of {address} does not answer: {exc}") from None
        if greeting is None:
            self.close()
            raise Unavailable(f"the agent of {address} does not answer")

    def send(self, doc: dict[str, Any]) -> None:
        try:
            self.sock.sendall(json.dumps(doc).encode() + b"\n")
        except OSError as exc:
            raise Lost(f"the node agent's connection broke: {exc}") from None

    def receive(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next answer line; None when none came within ``timeout``; ``Lost`` at EOF."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return None
            try:
                chunk = self.sock.recv(65536)
            except OSError as exc:
                raise Lost(f"the node agent's connection broke: {exc}") from None
            if not chunk:
                raise Lost("the node agent's connection ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise Lost("the node agent answered something else than a JSON object")
        return doc

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def first_answer(conn: Connection, address: str, timeout: float | None = None) -> dict[str, Any]:
    answer = conn.receive(timeout)
    if answer is None:
        conn.close()
        raise Lost(f"the agent of {address} did not answer within {timeout} s")
    if answer.get("ok") is False and answer.get("error") in SAFE_REFUSALS:
        conn.close()
        raise Unavailable(f"the agent of {address} refused: {answer.get('message')}")
    return answer


def call(
    ssh_command: list[str], address: str, request: dict[str, Any], timeout: float | None = None
) -> dict[str, Any]:
    """One request, its one answer (``Unavailable``: nothing ran; ``Lost``: it may have)."""
    conn = Connection(ssh_command, address)
    try:
        conn.send(request)
        return first_answer(conn, address, timeout)
    finally:
        conn.close()


def watch_command(pid: int, tag: str) -> str:
    """A shell command that ends once process ``pid`` has: what watches a job's process whose agent was
    lost. A zombie counts as ended (the child of a stopped agent stays one until the agent runs again).
    It carries the job's tag, so the job's cleanup ends it with the job."""
    stat = f"/proc/{int(pid)}/stat"
    state = f"$(sed 's/.*) //;s/ .*//' {stat} 2>/dev/null)"  # the field after the (command name)
    loop = f'while kill -0 {int(pid)} 2>/dev/null && [ "{state}" != Z ]; do sleep 0.2; done'
    return f"env {TAG_VAR}={shlex.quote(tag)} sh -c {shlex.quote(loop)}"


def watch_over_ssh(ssh_command: list[str], address: str, pid: int, tag: str) -> subprocess.Popen[bytes]:
    """``ssh`` that ends once process ``pid`` there has (``watch_command``)."""
    return subprocess.Popen(
        [*ssh_command, address, watch_command(pid, tag)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class AgentRank:
    """A rank shim the agent of a node started, watched the way ``subprocess.Popen`` is (``pid``,
    ``poll``, ``wait``, ``stdin``) with ``signal`` for its process group there. ``lost`` says the
    agent's connection ended before the shim's exit was reported: the shim (its own session there) is
    then watched over SSH until it ends, and its exit code is unknown here (255, as ssh gives for a
    lost connection; the launcher reads the shim's own record of it). A connection that carried no line
    for ``SILENT_BEATS`` of the agent's beats (``beat`` seconds; None: it sends none) counts as lost:
    lost wrongly, the shim is only watched over SSH instead."""

    def __init__(
        self,
        conn: Connection,
        pid: int,
        ssh_command: list[str],
        address: str,
        tag: str,
        beat: float | None = None,
    ) -> None:
        self.conn = conn
        self.pid, self.tag = pid, tag
        self.silent_s = None if beat is None else SILENT_BEATS * beat
        self.heard = time.monotonic()
        self.ssh_command, self.address = ssh_command, address
        self.returncode: int | None = None
        self.stdin = None
        self.lost = False
        self.watcher: subprocess.Popen[bytes] | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(["rank"], timeout or 0)
            self._read(left if left is not None else 1.0)
        return self.returncode

    def _read(self, timeout: float | None) -> None:
        if self.watcher is not None:
            try:
                self.watcher.wait(timeout=timeout)
                self.returncode = 255
            except subprocess.TimeoutExpired:
                pass
            return
        if self.silent_s is not None and timeout is not None:
            timeout = max(0.0, min(timeout, self.heard + self.silent_s - time.monotonic()))
        try:
            answer = self.conn.receive(timeout)
        except Lost:
            self._lose()
            return
        if answer is not None:
            self.heard = time.monotonic()
            if "exit" in answer:
                self.returncode = int(answer["exit"])
                self.conn.close()
        elif self.silent_s is not None and time.monotonic() - self.heard > self.silent_s:
            self._lose()  # a stopped agent: not even a beat

    def _lose(self) -> None:
        self.lost = True
        self.conn.close()
        try:
            self.watcher = watch_over_ssh(self.ssh_command, self.address, self.pid, self.tag)
        except OSError:
            self.returncode = 255

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.returncode is None and not self.lost:
            with contextlib.suppress(Lost):
                self.conn.send({"signal": int(sig)})
        elif self.returncode is None and self.watcher is not None:  # no agent: the signal over SSH
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [*self.ssh_command, self.address, f"kill -{int(sig)} -- -{int(self.pid)}"],
                    capture_output=True,
                    timeout=30,
                    check=False,
                )


def start_rank(ssh_command: list[str], address: str, request: dict[str, Any]) -> AgentRank:
    """Ask the node's agent to start the rank shim; raises ``Unavailable`` (nothing started), ``Lost``
    (it may have started) or ``RuntimeError`` (the agent could not start it: the reason)."""
    conn = Connection(ssh_command, address)
    try:
        conn.send(request)
        answer = first_answer(conn, address)
    except BaseException:
        conn.close()
        raise
    if not answer.get("ok"):
        conn.close()
        raise RuntimeError(str(answer.get("message") or answer))
    beat = answer.get("beat")
    tag = str(request["env"][TAG_VAR])
    return AgentRank(
        conn, int(answer["pid"]), ssh_command, address, tag, float(beat) if beat is not None else None
    )


def reap(cfg: ClusterConfig, address: str, tag: str) -> int:
    """End the job tagged ``tag`` on the node through its agent: how many processes survived.
    ``Unavailable`` whenever the agent did not answer (reaping again over SSH is harmless)."""
    ssh = cfg.get("ssh_command")
    if not ssh:
        raise Unavailable("the nodes are not reached over SSH: they have no agents")
    request = {"op": "reap", "node_main": cfg["node_main"], "tag": tag}
    try:
        answer = call(list(ssh), address, request, timeout=REAP_S)
    except Lost as exc:
        raise Unavailable(str(exc)) from None
    if not answer.get("ok") or not isinstance(answer.get("left"), int):
        raise Unavailable(str(answer.get("message") or answer))
    return int(answer["left"])
