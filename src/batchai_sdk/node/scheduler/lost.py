"""Lost nodes found by their agents' heartbeats: a running job's node whose agent said no ``beat`` for
``client.SILENT_BEATS`` beats (5 s) and whose SSH port takes no TCP connection within ``CONNECT_S`` is
lost; the job's attempt is stopped at once as a lost node's (``node X stopped answering``), so the
retry policy requeues it and placement, which skips the node until it answers again, starts the next
attempt on the nodes that are left (a spare) — in about 7 s, where mpirun's own SSH keep-alive needs
about 25 s to end the job.

The probe starts once the agent has been silent for ``PROBE_AFTER_S`` (2 beats), so its ``CONNECT_S``
wait overlaps the rest of the silence: a node is lost when its agent has been silent for the full
``SILENT_BEATS`` beats and a probe begun during that silence got no answer — the same two proofs as
before, found about ``CONNECT_S`` sooner than one after the other. A probe that got an answer clears the
node for ``RECHECK_S``; one that got none counts only once the silence reaches ``SILENT_BEATS`` beats.

A loaded node is not taken for lost: its agent may miss beats, but its kernel still answers a TCP connect
(no process of the node takes part in the handshake), so only a node that is off, cut off or gone fails
the probe. A node whose processes are all stopped (SIGSTOP) answers it too: that is the hang watch's.

``LostWatch`` owns the probes in flight and when each node last passed one; it is given the cluster, the
agents (``Agents.silent_for``), the scheduler's worker threads and the daemon's ``stop``.
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import sqlite3
import subprocess
import time

from ..agent import client
from ..agent.keeper import Agents
from ..policy import retries
from .cluster import Cluster
from .health import Stop
from .log import log

CONNECT_S = 3.0  # a TCP connect to the node's SSH port: the kernel's answer, however loaded the node
RECHECK_S = 2.0  # a node that passed a probe is probed again no sooner than this while still silent
PROBE_AFTER_S = 2.0  # an agent silent this long gets its node probed (lost needs SILENT_BEATS beats too)


def ssh_endpoint(ssh_command: list[str], address: str) -> tuple[str, int]:
    """The host and port ssh connects to for ``address`` (its config resolved by ``ssh -G``, no
    connection made); ``(address, 22)`` where that fails."""
    try:
        res = subprocess.run(
            [*ssh_command, "-G", address], capture_output=True, timeout=10, check=False, text=True
        )
    except (OSError, subprocess.TimeoutExpired):
        return address, 22
    host, port = address, 22
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key == "hostname" and value:
            host = value.strip()
        elif key == "port" and value.strip().isdigit():
            port = int(value.strip())
    return host, port


def takes_connections(host: str, port: int, timeout: float = CONNECT_S) -> bool:
    """Whether the node's kernel answers a TCP connect to ``port`` (refused counts as an answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


class LostWatch:
    def __init__(
        self,
        cluster: Cluster,
        agents: Agents,
        pool_exec: concurrent.futures.Executor,
        stop: Stop,
    ) -> None:
        self.cluster = cluster
        self.agents = agents
        self.pool_exec = pool_exec
        self.stop = stop
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.probes: dict[str, concurrent.futures.Future[bool]] = {}
        self.passed: dict[str, float] = {}  # address → when it last took a connection while silent

    def check(self, row: sqlite3.Row) -> None:
        """Stop the running job when one of its nodes is silent and unreachable."""
        ssh = self.cluster.cfg.get("ssh_command")
        if not ssh:
            return
        by_id = {n["id"]: n for n in self.cluster.nodes()}
        limit = client.SILENT_BEATS * client.HEARTBEAT_S
        for node_id in json.loads(row["nodes"] or "[]"):
            address = by_id[node_id]["address"] if node_id in by_id else None
            if not address:
                continue
            silent = self.agents.silent_for(address, at_least=min(PROBE_AFTER_S, limit))
            if silent is None:
                self.passed.pop(address, None)
                self.probes.pop(address, None)  # it beats again: a probe in flight is moot
                continue
            fut = self.probes.get(address)
            if fut is None:
                if time.monotonic() - self.passed.get(address, 0.0) > RECHECK_S:
                    self.probes[address] = self.pool_exec.submit(self._probe, list(ssh), address)
                continue
            if not fut.done():
                continue
            if not fut.result() and silent < limit:
                continue  # no answer yet, but the agent has not been silent long enough: kept till then
            del self.probes[address]
            if fut.result():
                self.passed[address] = time.monotonic()
                continue
            reason = (
                f"node {node_id} stopped answering (no heartbeat from its agent for {silent:.0f} s,"
                f" no TCP answer within {CONNECT_S:g} s)"
            )
            log(f"{row['key']}: {reason}; stopping the attempt")
            self.stop(row, "failed", reason, retries.EndCause.NODE_LOST.value)
            return

    def _probe(self, ssh: list[str], address: str) -> bool:
        if address not in self.endpoints:
            self.endpoints[address] = ssh_endpoint(ssh, address)
        return takes_connections(*self.endpoints[address])
