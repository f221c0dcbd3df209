"""Fault drills on plain SSH nodes (sshd on loopback addresses, tests/ssh/sshd.py): ``lose_node`` kills the
job's processes on the node and makes the node refuse the cluster's SSH commands for a while, so it is
kept out like a lost node (not taken back at the scheduler's next probe), and the job runs again on the
spare."""

from __future__ import annotations

import shlex
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import SSHNodes, start_nodes

from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk._faults import REFUSE_SECONDS
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

# a rank that says where it runs and sleeps; on a later attempt it says it is back and ends
SLEEPER = """
import os, sys, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
if os.environ.get("AZ_BATCHAI_JOB_RESTART_COUNT", "0") != "0":
    print(f"rank {rank} back", flush=True)
    sys.exit(0)
open(os.path.join(sys.argv[1], f"rank-{rank}"), "w").close()
time.sleep(600)
"""


# This module's own nodes, on addresses no other test uses: the node that lose_node refuses keeps the refusal
# in its HOME, which every sshd node on this machine shares, and its agents are found by the address their
# sessions came in on; on the shared nodes a test of another worker (pytest -n) would be refused there too.
DRILL_ADDRESSES = ["127.0.0.12", "127.0.0.13", "127.0.0.14"]


@pytest.fixture(scope="module")
def drill_nodes(ssh_nodes: SSHNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHNodes]:
    with start_nodes(tmp_path_factory.mktemp("drill_sshd"), DRILL_ADDRESSES) as nodes:  # ssh_nodes: the skips
        yield nodes


@pytest.fixture(scope="module")
def lab(drill_nodes: SSHNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("drills")
    (root / "mnt" / "share").mkdir(parents=True)
    ws = drill_nodes.workspace("drills", root, DRILL_ADDRESSES)
    yield ws
    ws.close()


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster("d", vm_size="Standard_D2_v2", nodes=3, allow_fault_injection=True)


def test_lose_node_on_an_ssh_node_refuses_its_ssh_until_the_time_is_over(
    lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    exp = lab.create_experiment("e")
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER))
    command = f"{shlex.quote(sys.executable)} {script} {tmp_path}"
    job = exp.create_job("lose", cluster=cluster, node_count=2, command_line=command, max_retries=1).submit()
    wait_for(lambda: len(list(tmp_path.glob("rank-*"))) == 2 or job.state.ended, timeout=120,
             what="both ranks to run")  # fmt: skip
    assert job.state is JobState.RUNNING, job.status.failure_reason
    fault = job.inject_fault("lose_node")
    wait_for(lambda: len(job.attempts) == 1, what="the attempt to end", timeout=60)
    lost_at = time.monotonic()
    assert job.attempts[0]["cause"] == "node_lost", job.attempts[0]
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    assert fault["node"] not in job.status.nodes  # the next attempt ran on the spare
    assert sorted(job.tail("stdout.txt")) == ["rank 0 back", "rank 1 back"]
    # the lost node refuses the cluster's SSH commands: the scheduler cannot take it back yet
    assert cluster.node_counts.unusable == 1
    time.sleep(max(0.0, 10 - (time.monotonic() - lost_at)))
    assert cluster.node_counts.unusable == 1, "the lost node was taken back before its refusal ended"
    # once the refusal is over it answers, and is free again
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=REFUSE_SECONDS + 60,
             what="the lost node to answer again")  # fmt: skip
