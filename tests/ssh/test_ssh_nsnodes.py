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
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _helpers import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.exceptions import SSHError
from batchai_sdk.experiment import Experiment
from batchai_sdk.job import Job
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

# A rank that says where it runs (hostname, its pid as its node numbers it, its job's tag), then sleeps.
SLEEPER = """
import json, os, socket, sys, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
if os.environ.get("AZ_BATCHAI_JOB_RESTART_COUNT", "0") != "0":
    print(f"rank {rank} back on {socket.gethostname()}", flush=True)
    sys.exit(0)
info = {"host": socket.gethostname(), "pid": os.getpid(), "tag": os.environ["BATCHAI_JOB_TAG"]}
with open(os.path.join(sys.argv[1], f"rank-{rank}.json.tmp"), "w") as f:
    f.write(json.dumps(info))
os.rename(os.path.join(sys.argv[1], f"rank-{rank}.json.tmp"), os.path.join(sys.argv[1], f"rank-{rank}.json"))
time.sleep(600)
"""

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

STARTED: list[Job] = []


@pytest.fixture(scope="module")
def lab(ns_nodes: NSNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    ws = ns_nodes.workspace("nsfail", tmp_path_factory.mktemp("nsfail"), ns_nodes.addresses[:2])
    yield ws
    ws.close()


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster("c", vm_size="Standard_NC6", nodes=2)


@pytest.fixture(scope="module")
def exp(lab: Workspace) -> Experiment:
    return lab.create_experiment("e")


@pytest.fixture
def head(ns_nodes: NSNodes) -> NSNode:
    return ns_nodes["node1"]


@pytest.fixture
def second(ns_nodes: NSNodes) -> NSNode:
    return ns_nodes["node2"]


@pytest.fixture
def scripts(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture(autouse=True)
def _mended(ns_nodes: NSNodes, cluster: Cluster) -> Iterator[None]:
    yield
    ns_nodes.heal_all()
    while STARTED:  # a test that failed midway leaves no job running for the next one
        job = STARTED.pop()
        if not job.state.ended:
            job.terminate(timeout=120)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=120, what="the nodes to be free")
    for name in ("node1", "node2"):
        assert ns_nodes[name].leftovers() == [], name


def sleeper_job(
    exp: Experiment, cluster: Cluster, name: str, script: Path, out: Path, **options: object
) -> tuple[Job, dict[int, dict[str, object]]]:
    """A 2-node job whose ranks sleep; returns it once both ranks run, with what each rank said."""
    out.mkdir(exist_ok=True)
    job = exp.create_job(
        name, cluster=cluster, node_count=2, command_line=f"{sys.executable} {script} {out}", **options
    ).submit()
    STARTED.append(job)
    wait_for(
        lambda: len(list(out.glob("rank-*.json"))) == 2 or job.state.ended,
        timeout=90,
        what=f"both ranks of {name} to run",
    )
    assert not job.state.ended, job.status.failure_reason
    ranks = {r: json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)}
    return job, ranks


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
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    out = tmp_path / "orphan"
    out.mkdir()
    job = exp.create_job(
        "orphan", cluster=cluster, node_count=2,
        command_line=f"{sys.executable} {scripts('orphan.py', ORPHANER)} {out}",
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
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(exp, cluster, "cut", scripts("sleep.py", SLEEPER), tmp_path / "cut")
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
    healed = time.monotonic()
    second.heal()
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=60, what="node2 to answer again")
    usable = time.monotonic() - healed
    # nothing of the failed job survived the partition on node2: a node counts as free only when empty
    assert second.tagged(str(ranks[1]["tag"])) == {}
    after = exp.create_job("after_heal", cluster=cluster, node_count=2, command_line="hostname")
    after.submit()  # the first submit after the heal: the client's connection to node2 must not be stale
    STARTED.append(after)
    submitted = time.monotonic() - healed
    assert after.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, after.status.failure_reason
    print(f"heal → node idle {usable:.1f} s, heal → submit accepted {submitted:.1f} s")
    assert sorted(after.tail("stdout.txt")) == ["node1", "node2"]


def test_a_node_powered_off_loses_its_ranks_and_the_job_runs_again_when_it_is_back(
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(
        exp, cluster, "power", scripts("sleep.py", SLEEPER), tmp_path / "power", max_retries=1
    )
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
    exp: Experiment,
    cluster: Cluster,
    head: NSNode,
    second: NSNode,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, ranks = sleeper_job(exp, cluster, "split", scripts("sleep.py", SLEEPER), tmp_path / "split")
    head.block(second)
    second.block(head)  # the client still reaches both
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert f"node {second.address} stopped answering" in reason, reason
    assert head.tagged(str(ranks[0]["tag"])) == {}
    # the head node (where the scheduler runs) cannot reach node2, though this client can: unusable
    wait_for(lambda: cluster.node_counts.unusable == 1, timeout=30, what="node2 to count as unusable")
    head.unblock(second)
    second.unblock(head)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=60, what="node2 to answer again")
    assert second.tagged(str(ranks[1]["tag"])) == {}, "rank 1 outlived the partition on node2"
    again = exp.create_job("after_split", cluster=cluster, node_count=2, command_line="hostname").submit()
    STARTED.append(again)
    assert again.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, again.status.failure_reason
