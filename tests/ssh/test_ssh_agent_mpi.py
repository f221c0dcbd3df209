"""mpirun's daemons started by the nodes' agents (``BATCHAI_NODE_AGENT_MPI=1`` in the workspace's env,
opt-in: agent/rsh.py as mpirun's ``plm_rsh_agent``) and, for a node without an agent, over ssh as by
default: real sshd nodes (127.0.0.2 head, 127.0.0.3 with an agent, 127.0.0.4 whose sshd refuses the
agent's socket forwarding, so it never has one), real OpenMPI, one 3-node job whose ranks each run once."""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from sshd import NODE_ADDRESSES, SSHNodes, sshd_available, start_nodes
from test_ssh_scheduler import descendants, is_node_agent, left_on_nodes

from _procs import pid_alive, wait_for
from batchai_sdk import JobState
from batchai_sdk._models import NodeCounts

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND, THIRD = NODE_ADDRESSES[:3]

# A rank: one line with its rank and the command lines of its ancestors.
RECORD = """
import json, os, sys
chain, pid = [], os.getppid()
while pid > 1:
    chain.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"rank": os.environ.get("OMPI_COMM_WORLD_RANK"), "chain": chain}) + "\\n")
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    """The 3-node job's ranks on SECOND and THIRD: node address → its rank's ancestors' command lines."""
    if not sshd_available() or os.geteuid() != 0:
        pytest.skip("the sshd nodes need root and OpenSSH's sshd")
    root = tmp_path_factory.mktemp("agentmpi")
    (root / "record.py").write_text(textwrap.dedent(RECORD))
    out, gate = root / "ranks", root / "go"
    with start_nodes(root / "sshd", [HEAD, SECOND]) as nodes:
        third = nodes.add(THIRD)
        third.extra = ("AllowStreamLocalForwarding no",)  # its agent's socket is never forwarded
        third.restart()
        ws = nodes.workspace("ampi", root, [HEAD, SECOND, THIRD], env={"BATCHAI_NODE_AGENT_MPI": "1"})
        try:
            exp = ws.create_experiment("e")
            cluster = ws.create_cluster("c", nodes=3)
            python = shlex.quote(sys.executable)
            holder = exp.create_job(
                "hold",
                cluster=cluster,
                toolkit="custom",
                command_line=f"while [ ! -e {gate} ]; do sleep 0.05; done",
            ).submit()
            wait_for(lambda: bool(agents(nodes, SECOND)), 90, "the node agent of the second node")
            job = exp.create_job(
                "wide", cluster=cluster, node_count=3, command_line=f"{python} {root / 'record.py'} {out}"
            ).submit()
            gate.touch()
            assert holder.wait(timeout=90, poll_interval=0.1) is JobState.SUCCEEDED
            assert job.wait(timeout=120, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
            records = [json.loads(line) for line in out.read_text().splitlines()]
            assert sorted(r["rank"] for r in records) == ["0", "1", "2"]  # each rank once
            chains: dict[str, list[str]] = {}
            for record in records:
                address = node_of(record)
                if address is not None:
                    chains[address] = record["chain"]
            yield chains
            wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), 60, "the nodes to be free")
            assert left_on_nodes(nodes, [HEAD, SECOND, THIRD]) == []
        finally:
            ws.close()


def agents(nodes: SSHNodes, address: str) -> list[int]:
    sshd = nodes.nodes[address].process
    assert sshd is not None
    return [pid for pid in descendants(sshd.pid) if pid_alive(pid) and is_node_agent(pid)]


def node_of(record: dict[str, Any]) -> str | None:
    """The node whose sshd the rank descends from (its daemon's session), if not the head's."""
    for address in (SECOND, THIRD):
        if any(f"sshd_config_{address}" in line for line in record["chain"]):
            return address
    return None


def started_by_agent(chain: list[str]) -> bool:
    return any(" agent " in f"{line} " and "batchai_node" in line for line in chain)


def test_mpi_daemons_are_started_by_the_nodes_agent_when_asked(ran: dict[str, list[str]]) -> None:
    chain = ran[SECOND]
    assert any("orted" in line for line in chain), chain
    assert started_by_agent(chain), chain  # no SSH session, no login shell for the daemon


def test_a_node_without_an_agent_gets_its_mpi_daemon_over_ssh(ran: dict[str, list[str]]) -> None:
    chain = ran[THIRD]
    assert any("orted" in line for line in chain), chain
    assert not started_by_agent(chain), chain  # rsh found no agent there and became ssh
