"""Node failures on nodes that are separate machines (tests/nsnodes.py): a process a rank leaves on the
second node, a node cut off mid-job (its link down), a node powered off (its PID 1 killed), the head
node cut off from the others while the client still reaches both.

Each node has its own /proc, so what a job leaves on a node is looked for in THAT node's /proc — a
loopback "node" shares this machine's, where a process anywhere looks like a process everywhere — and
its own network, so a partition leaves TCP connections open but silent, as a real one does, instead of
refusing them.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from nslab import STARTED, heal_and_rerun, sleeper_job

from _procs import wait_for
from batchai_sdk import JobState
from batchai_sdk.cluster import Cluster
from batchai_sdk.exceptions import SSHError
from batchai_sdk.experiment import Experiment
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

# Rank 1 starts a child in a session of its own (out of the rank's process group) and leaves it.
ORPHANER = """
import json, os, socket, subprocess, sys
rank = os.environ["OMPI_COMM_WORLD_RANK"]
if rank == "1":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(os.path.join(sys.argv[1], "orphan.json"), "w") as f:
        f.write(json.dumps({"host": socket.gethostname(), "pid": child.pid}))
print(f"rank {rank} done on {socket.gethostname()}", flush=True)
"""

WORKSPACE = "nsfail"


def test_a_runner_drops_the_connection_a_partition_left_silent_and_the_first_command_after_the_heal_runs(
    ns_nodes: NSNodes, second: NSNode, tmp_path: Path
) -> None:
    runner = SSHRunner(
        second.address, host_keys=HostKeyStore(tmp_path / "known_hosts", trust_on_first_use=True),
        user="root", key_file=ns_nodes.key_file, connect_timeout=2, retries=1, keepalive=1,
    )  # fmt: skip
    try:
        assert runner.run("hostname").stdout == "node2\n"
        second.partition()
        time.sleep(3)  # keepalives go unanswered: TCP backs off, the transport still reads "active"
        assert runner.connected
        why = runner.check(timeout=1)  # what node_counts asks: a command, not an open transport
        assert why is not None and "did not run a command within 1 s" in why, why
        assert not runner.connected  # dropped: the next use connects afresh
        with pytest.raises(SSHError, match="cannot connect"):
            runner.run("true")
        second.heal()
        assert runner.run("hostname").stdout == "node2\n"
        second.partition()
        time.sleep(3)
        second.heal()  # the connection made before this partition is stale now: run() must not fail on it
        assert runner.run("hostname", timeout=20).stdout == "node2\n"
    finally:
        second.heal()
        runner.close()


def test_a_process_a_rank_left_on_the_second_node_is_gone_at_the_jobs_end(
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    script: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    out = tmp_path / "orphan"
    out.mkdir()
    job = exp.create_job(
        "orphan", cluster=cluster, node_count=2,
        command_line=f"{shlex.quote(sys.executable)} {script('orphan.py', ORPHANER)} {out}",
    ).submit()  # fmt: skip
    STARTED.append(job)
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(job.tail("stdout.txt")) == ["rank 0 done on node1", "rank 1 done on node2"]
    orphan = json.loads((out / "orphan.json").read_text())
    assert orphan["host"] == "node2"
    # by the job's reported end, the child it left is gone from node2 (looked up in node2's own /proc)
    assert orphan["pid"] not in second.processes(), second.processes()
    assert second.leftovers() == [] and head.leftovers() == []


def test_a_partitioned_node_is_named_unusable_until_it_answers_and_the_first_submit_after_heals_runs(
    ns_nodes: NSNodes,
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(exp, cluster, "cut", tmp_path / "cut")
    assert {r["host"] for r in ranks.values()} == {"node1", "node2"}
    cut = time.monotonic()
    second.partition()
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.FAILED
    detected = time.monotonic() - cut
    reason = job.status.failure_reason or ""
    assert f"node {second.address} stopped answering" in reason, reason
    print(f"\npartition detected (link down → job failed, node named) in {detected:.1f} s")
    assert detected < 45, f"the partition took {detected:.0f} s to be noticed"
    assert head.tagged(str(ranks[0]["tag"])) == {}  # the head node's part of the job is gone
    wait_for(lambda: cluster.node_counts.unusable == 1, timeout=30, what="node2 to count as unusable")
    time.sleep(3)  # probes of a node that does not answer fail: it stays unusable
    assert cluster.node_counts.unusable == 1
    usable, submitted = heal_and_rerun(ns_nodes, exp, cluster, "after_heal", str(ranks[1]["tag"]))
    print(f"heal → node idle {usable:.1f} s, heal → first submit accepted {submitted:.1f} s")


def test_a_node_powered_off_loses_its_ranks_and_the_job_runs_again_when_it_is_back(
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(exp, cluster, "power", tmp_path / "power", max_retries=1)
    off = time.monotonic()
    second.power_off()
    wait_for(lambda: len(job.attempts) == 1, what="the attempt to end", timeout=120)
    print(f"\npower loss noticed in {time.monotonic() - off:.1f} s")
    attempt = job.attempts[0]
    assert attempt["cause"] == "node_lost", attempt
    assert f"node {second.address} stopped answering" in attempt["reason"], attempt
    assert "retry 1 of 1" in attempt["reason"]
    assert head.tagged(str(ranks[0]["tag"])) == {}  # rank 0 did not outlive its job's attempt
    time.sleep(3)
    assert job.state is JobState.QUEUED  # requeued: it waits for the lost node rather than failing on it
    assert cluster.node_counts.unusable == 1
    second.power_on()  # a fresh boot: nothing of the old attempt is left there
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(job.tail("stdout.txt")) == ["rank 0 back on node1", "rank 1 back on node2"]


def test_the_head_node_cut_off_from_the_others_fails_the_job_and_names_the_node_it_lost(
    ns_nodes: NSNodes,
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(exp, cluster, "split", tmp_path / "split")
    head.block(second)
    second.block(head)  # the client still reaches both
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert f"node {second.address} stopped answering" in reason, reason
    assert head.tagged(str(ranks[0]["tag"])) == {}
    # the head node (where the scheduler runs) cannot reach node2, though this client can: unusable
    wait_for(lambda: cluster.node_counts.unusable == 1, timeout=30, what="node2 to count as unusable")
    heal_and_rerun(ns_nodes, exp, cluster, "after_split", str(ranks[1]["tag"]))
