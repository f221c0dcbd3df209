"""A lost node on a 3-node cluster of namespace nodes (tests/nsnodes.py): the job's attempt ends within
seconds of the node's power-off (its agent's heartbeat stops and its SSH port takes no connection), and
the next attempt runs at once on the spare node while the lost one is kept out until it is back.

How soon: the scheduler probes a node's SSH port while its agent's silence is still short of the 5 beats
that make it lost, so the probe's 3 s wait overlaps the silence instead of following it. The attempt ends
(and the job is requeued) within 8 s of the power-off, where probing after the 5 beats took 9 to 10 s."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from nslab import STARTED, sleeper_job

from _labs import ssh_lab
from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from nsnodes import NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

WORKSPACE = "nsspare"
ENDED_WITHIN_S = 8.0  # the power-off → the attempt's recorded end (5 s of silence, then its stop)


lab = ssh_lab(3, WORKSPACE, nodes="ns_nodes")


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster(f"{lab.name}c", vm_size="Standard_D2_v2", nodes=3, allow_fault_injection=True)


@pytest.fixture(autouse=True)
def mended(ns_nodes: NSNodes, cluster: Cluster) -> Iterator[None]:
    """After each test: every node on and linked, no job running, the three nodes idle."""
    yield
    ns_nodes.heal_all()
    while STARTED:
        job = STARTED.pop()
        if not job.state.ended:
            job.terminate(timeout=120)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="the nodes to be free")
    for name in ("node1", "node2", "node3"):
        with contextlib.suppress(AssertionError):
            wait_for(lambda n=name: not ns_nodes[n].leftovers(), timeout=15, what=f"{name} to be empty")


def test_a_lost_nodes_job_resumes_on_the_spare_within_seconds_with_the_lost_node_kept_out(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    exp = lab.create_experiment("e")
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    out = tmp_path / "spare"
    job, ranks = sleeper_job(exp, cluster, "spare", out, max_retries=1)
    hosts = {str(r["host"]) for r in ranks.values()}
    assert len(hosts) == 2, ranks
    spare = ({"node1", "node2", "node3"} - hosts).pop()
    lost = ns_nodes[str(ranks[1]["host"])]  # rank 1's node: not the head node, where the scheduler runs
    time.sleep(7)  # the agents beat for a while: a healthy, busy job is never taken for lost
    assert job.state is JobState.RUNNING and job.attempts == []
    off = time.monotonic()
    lost.power_off()
    wait_for(lambda: len(job.attempts) == 1, what="the attempt to end", timeout=60)
    ended = time.monotonic() - off
    attempt = job.attempts[0]
    assert attempt["cause"] == "node_lost", attempt
    assert f"node {lost.address} stopped answering" in attempt["reason"], attempt
    # the new attempt runs on the spare while the lost node is still off
    assert job.wait(timeout=90, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    resumed = time.monotonic() - off
    lines = sorted(job.tail("stdout.txt"))
    assert lines == sorted(f"rank {r} back on {h}" for r, h in enumerate([str(ranks[0]["host"]), spare])), (
        lines
    )
    assert not lost.running
    assert cluster.node_counts.unusable == 1  # kept out until it answers again
    print(
        f"\npower-off → attempt ended {ended:.1f} s, → the job ran again on {spare} and ended {resumed:.1f} s"
    )
    assert ended < 15, f"the lost node took {ended:.0f} s to be noticed"
    lost.power_on()
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=90, what="the lost node to be back")


@pytest.mark.parametrize("kind", ["lose_node", "kill_rank"])
def test_a_drill_on_ssh_nodes_ends_the_attempt_and_the_job_runs_again(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path, kind: str
) -> None:
    exp = lab.create_experiment("e", exist_ok=True)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    job, ranks = sleeper_job(exp, cluster, kind.replace("_", ""), tmp_path / kind, max_retries=1,
                             retry_on_exit_codes=[137])  # fmt: skip
    fault = job.inject_fault(kind, **({"rank": 1} if kind == "kill_rank" else {}))
    wait_for(lambda: len(job.attempts) == 1, what="the attempt to end", timeout=60)
    attempt = job.attempts[0]
    if kind == "lose_node":
        assert attempt["cause"] == "node_lost", attempt
        assert f"node {fault['node']} stopped answering (fault drill: lose_node)" in attempt["reason"]
        assert ns_nodes.by_address(fault["node"]).tagged(str(ranks[1]["tag"])) == {}  # its ranks killed
    else:
        assert attempt["exit_code"] == 137 and "rank 1" in attempt["reason"], attempt
    assert job.wait(timeout=90, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(line.split(" on ")[0] for line in job.tail("stdout.txt")) == ["rank 0 back", "rank 1 back"]


def test_a_powered_off_node_ends_its_jobs_attempt_within_8_seconds(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    exp = lab.create_experiment("e", exist_ok=True)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    job, ranks = sleeper_job(exp, cluster, "fast", tmp_path / "fast", max_retries=1)
    lost = ns_nodes[str(ranks[1]["host"])]  # rank 1's node: not the head node, where the scheduler runs
    time.sleep(4)  # the agents beat a while: a busy job's nodes are not taken for lost
    assert job.state is JobState.RUNNING and job.attempts == []
    off = time.time()
    lost.power_off()
    wait_for(lambda: len(job.attempts) == 1, what="the attempt to end", timeout=60)
    attempt = job.attempts[0]
    assert attempt["cause"] == "node_lost" and f"node {lost.address} stopped answering" in attempt["reason"]
    ended = datetime.fromisoformat(str(attempt["end"])).timestamp() - off
    print(f"\npower-off → the attempt's end {ended:.1f} s ({attempt['reason']})")
    assert ended < ENDED_WITHIN_S, f"the lost node ended the attempt {ended:.1f} s after its power-off"
    assert job.wait(timeout=90, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    lost.power_on()
