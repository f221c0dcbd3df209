"""The scheduler's side of the node agents: one agent per node of an SSH cluster, started over the kept
SSH connection (``ssh … exec python3 -S …/__main__.py agent NAME``) with the scheduler holding its stdin,
and its socket forwarded to this head node through that connection's master (``ssh -O forward -L``).

An agent that exits, or whose start fails, is started again after ``RETRY_S``; one that is there but says
no ``beat`` for ``client.SILENT_BEATS`` beats (stopped, or its node stalled) has its session ended and is
started again the same way (the new one binds the socket path anew; the silent one, should it run again,
reads the end of its stdin and exits once its commands ended); the launchers and the
cleanup meanwhile use SSH (client.py). The agents go with the scheduler: ``close`` ends their stdin, and a
scheduler killed outright closes it too (its end of the pipe goes with the process), so no agent outlives
the scheduler that could start anything twice. A node's agent runs the node code the cluster's
configuration names; a configuration naming another copy, or another ssh command, restarts it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol.cluster import ClusterConfig
from . import client

SWITCH = "BATCHAI_NODE_AGENT"  # "0" in the cluster's env (Workspace.ssh(env=...)): no agents
RETRY_S = 10.0
READY_S = 30.0


@dataclass
class Kept:
    key: tuple[str, ...]  # what it runs as (Agents._key): the ssh command, python, node_main, address
    address: str
    proc: subprocess.Popen[bytes] | None = None
    remote: str | None = None  # the agent's socket on the node, once it said ready
    started: float = field(default_factory=time.monotonic)
    heard: float = 0.0  # when it last said anything on stdout (its beat), once ready
    future: concurrent.futures.Future[None] | None = None

    @property
    def ssh(self) -> list[str]:
        """The ssh command it was started with (its key less python, node_main and the address)."""
        return list(self.key[:-3])


class Agents:
    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.kept: dict[str, Kept] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="agent")
        self.failures: dict[str, int] = {}  # address → starts in a row that never got ready
        # address → when (monotonic) its agent, once ready, was last heard; kept across the restarts of a
        # silent agent until another one there is ready (the scheduler's lost-node watch reads it)
        self.last_heard: dict[str, float] = {}

    def tick(self, cfg: ClusterConfig, addresses: list[str]) -> None:
        """Start the agents of ``addresses`` that are missing, dead or stale; let go of the others."""
        ssh = cfg.get("ssh_command")
        off = (cfg.get("env") or {}).get(SWITCH) == "0"  # the old path, everywhere: SSH per step
        wanted = set(addresses) if ssh and cfg.get("python") and cfg.get("node_main") and not off else set()
        for address in list(self.kept):
            kept = self.kept[address]
            busy = kept.future is not None and not kept.future.done()
            if busy:
                continue
            dead = kept.proc is None or kept.proc.poll() is not None
            if not dead and kept.remote and _silent(kept):
                assert kept.proc is not None
                self.last_heard.setdefault(address, kept.heard)
                self.log(f"the node agent of {address} is silent (stopped?): starting another")
                kept.proc.kill()  # its session here; the agent there takes nothing more through it
                kept.proc.wait()
                dead = True
            if address not in wanted or kept.key != self._key(cfg, address):
                self.pool.submit(self._stop, kept)
                del self.kept[address]
            elif dead and time.monotonic() - kept.started > self._delay(kept):
                if kept.remote:
                    self.last_heard.setdefault(address, kept.heard)
                self.failures[address] = 0 if kept.remote else self.failures.get(address, 0) + 1
                if kept.remote and kept.proc is not None:
                    self.log(
                        f"the node agent of {address} exited (code {kept.proc.returncode}): starting it again"
                    )
                del self.kept[address]
        for address in wanted - set(self.kept):
            kept = Kept(self._key(cfg, address), address)
            self.kept[address] = kept
            kept.future = self.pool.submit(self._start, kept, cfg)

    def silent_for(self, address: str, at_least: float | None = None) -> float | None:
        """Seconds since the node's agent, once ready, was last heard, when that is over ``at_least``
        seconds (default ``SILENT_BEATS`` beats; and no agent there is ready since); None while it beats,
        or where no agent ever was."""
        kept = self.kept.get(address)
        if kept is not None and kept.remote and kept.proc is not None and kept.proc.poll() is None:
            if not (kept.future is None or kept.future.done()):
                return None
            heard = kept.heard if _silent(kept, at_least) else None
        else:
            heard = self.last_heard.get(address)
        if heard is None:
            return None
        return time.monotonic() - heard

    def _delay(self, kept: Kept) -> float:
        """Seconds before a dead agent is started again: at once after one that served, else RETRY_S,
        doubling with each start in a row that failed (a node that refuses forwarding is not retried
        every few seconds for ever)."""
        if kept.remote:
            return 0.0
        return RETRY_S * (1 << min(self.failures.get(kept.address, 0), 5))

    @staticmethod
    def _key(cfg: ClusterConfig, address: str) -> tuple[str, ...]:
        """What an agent runs as: a change of any part restarts it (``Kept.ssh`` reads the front back)."""
        return (*(cfg.get("ssh_command") or ()), cfg["python"], cfg["node_main"], address)

    def _start(self, kept: Kept, cfg: ClusterConfig) -> None:
        ssh = list(cfg.get("ssh_command") or ())
        address = kept.address
        name = client.agent_name(ssh, address)
        try:
            # the shared connection first: the agent's own session then rides it (and is no master)
            subprocess.run(
                [*ssh, "-o", "ConnectTimeout=5", address, "true"],
                capture_output=True,
                timeout=30,
                check=False,
            )
            remote_cmd = "exec " + shlex.join([cfg["python"], "-S", cfg["node_main"], "agent", name])
            proc = subprocess.Popen(
                [*ssh, "-o", "ConnectTimeout=5", address, remote_cmd],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,  # its ready line; its log lines go to the scheduler's log
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.log(f"could not start the node agent of {address}: {exc}")
            return
        kept.proc = proc
        remote = _ready_line(proc, READY_S)
        if remote is None:
            self.log(f"the node agent of {address} did not start; jobs there use SSH")
            _end(proc)
            return
        local = client.forward_path(ssh, address)
        forward = f"{local}:{remote}"
        try:
            _ssh([*ssh, "-O", "cancel", "-L", forward, address])  # an older agent's forward, if any
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)
            done = _ssh([*ssh, "-O", "forward", "-L", forward, address])
        except (OSError, subprocess.TimeoutExpired) as exc:
            done = subprocess.CompletedProcess([], 255, b"", str(exc).encode())
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()
            self.log(f"could not forward the node agent of {address}: {why}")
            _end(proc)
            return
        kept.heard = time.monotonic()
        kept.remote = remote
        self.last_heard.pop(address, None)  # beats again
        self.log(f"node agent of {address} ready (pid {proc.pid} here)")

    def _stop(self, kept: Kept) -> None:
        if kept.proc is not None:
            _end(kept.proc)
        if kept.remote is not None:
            local = client.forward_path(kept.ssh, kept.address)
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                _ssh([*kept.ssh, "-O", "cancel", "-L", f"{local}:{kept.remote}", kept.address])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(local)

    def close(self) -> None:
        """Let every agent go (their stdin closed: they take nothing more and exit)."""
        for kept in self.kept.values():
            if kept.future is not None:
                with contextlib.suppress(Exception):
                    kept.future.result(timeout=READY_S + 5)
            self._stop(kept)
        self.kept.clear()
        self.pool.shutdown(wait=False)


def _ssh(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=30, check=False)


def _silent(kept: Kept, at_least: float | None = None) -> bool:
    """Whether the agent said nothing on stdout for ``at_least`` seconds (default ``SILENT_BEATS``
    beats); what it said is drained (its beats would otherwise fill the pipe)."""
    assert kept.proc is not None and kept.proc.stdout is not None
    out = kept.proc.stdout.fileno()
    while select.select([out], [], [], 0)[0]:
        try:
            if not os.read(out, 65536):
                break  # it ended: the next tick sees it dead
        except OSError:
            break
        kept.heard = time.monotonic()
    limit = client.SILENT_BEATS * client.HEARTBEAT_S if at_least is None else at_least
    return time.monotonic() - kept.heard > limit


def _ready_line(proc: subprocess.Popen[bytes], timeout: float) -> str | None:
    """The agent's socket path from its ``ready PATH`` line, or None (it failed or took too long)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline().decode(errors="replace").strip()
    word, _, path = line.partition(" ")
    return path if word == "ready" and path.startswith("/") else None


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Close the agent's stdin (its lifeline); it exits once the shims it started ended."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)
