"""The nodes' warm agents on real sshd nodes (127.0.0.2 head, 127.0.0.3): jobs are prepared and cleaned
up through them and a custom command's shim is the agent's child, not an SSH session's (MPI's daemons
still come over ssh: launcher.mpirun_via_agents), with the job's secrets; such a command is terminated
through its agent; agents that stop answering are passed over (SSH) with the job run once, killed or stopped ones
are started again, and jobs whose agents are killed or stopped while they run go on and end once; a scheduler
killed with kill -9 leaves agents that start nothing more and go once their job ended, which runs once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd import NODE_ADDRESSES, SSHNodes
from test_ssh_scheduler import descendants, is_node_agent, left_on_nodes

from _labs import lab_root, ssh_lab
from _procs import pid_alive, wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from batchai_sdk.job import Job
from batchai_sdk.node.agent.client import agent_name
from batchai_sdk.node.agent.serve import socket_path

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]

# A process of the job: appends one line per run (its node, the command lines and pids of its
# ancestors), then waits for ``gate`` when one is given, and exits with the code given third.
RECORD = """
import json, os, sys, time
out, gate = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
chain, pids, pid = [], [], os.getppid()
while pid > 1:
    chain.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
    pids.append(pid)
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
line = {"node": os.environ["BATCHAI_JOB_NODES"], "chain": chain, "pids": pids,
        "token": len(os.environ.get("TOKEN", ""))}
with open(out, "a") as f:
    f.write(json.dumps(line) + "\\n")
while gate and not os.path.exists(gate):
    time.sleep(0.05)
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
"""


def _record_script(root: Path) -> None:
    (root / "record.py").write_text(textwrap.dedent(RECORD))


lab = ssh_lab([HEAD, SECOND], "agent", prepare=_record_script)


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster("c", nodes=2)


@pytest.fixture(scope="module")
def exp(lab: Workspace) -> Experiment:
    return lab.create_experiment("e")


@pytest.fixture(autouse=True)
def _nothing_left(ssh_nodes: SSHNodes, cluster: Cluster) -> Iterator[None]:
    yield
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=60, what="the nodes to be free")
    assert left_on_nodes(ssh_nodes, [HEAD, SECOND]) == []


def agents(ssh_nodes: SSHNodes, address: str) -> list[int]:
    """The node agents running under the node's sshd."""
    sshd = ssh_nodes.nodes[address].process
    assert sshd is not None
    return [pid for pid in descendants(sshd.pid) if pid_alive(pid) and is_node_agent(pid)]


def runs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def agent_of(run: dict[str, Any]) -> int | None:
    """The pid of the node agent the run descends from, if any."""
    for cmdline, pid in zip(run["chain"], run["pids"], strict=True):
        if " agent " in f"{cmdline} " and "batchai_node" in cmdline:
            return int(pid)
    return None


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]


def under_agent(run: dict[str, Any]) -> bool:
    return agent_of(run) is not None


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Agents a test stops (SIGSTOP): killed at its end, whatever happened, so none outlives it."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def command(lab: Workspace, out: Path | None, gate: Path | None = None, code: int = 0) -> str:
    line = f"{shlex.quote(sys.executable)} {lab_root(lab) / 'record.py'} {out or os.devnull}"
    return line + (f" {gate}" if gate else "") + (f" {code}" if code else "")


@contextlib.contextmanager
def held(lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes) -> Iterator[None]:
    """A job that holds one node (and so the scheduler and its agents) until the block ends; the block
    starts once both nodes have an agent."""
    gate = lab_root(lab) / "release"
    gate.unlink(missing_ok=True)
    holder = exp.create_job(
        f"hold-{os.urandom(3).hex()}",
        cluster=cluster,
        toolkit="custom",
        command_line=command(lab, None, gate),
    ).submit()
    wait_for(lambda: bool(agents(ssh_nodes, HEAD) and agents(ssh_nodes, SECOND)), 60, "the node agents")
    try:
        yield
    finally:
        gate.touch()
        assert holder.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, holder.status.failure_reason


def test_jobs_start_through_the_node_agents_with_their_secrets(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    mpi, custom = tmp_path / "mpi", tmp_path / "custom"
    with held(lab, exp, cluster, ssh_nodes):
        jobs = [
            exp.create_job("mpi", cluster=cluster, node_count=2, command_line=command(lab, mpi)).submit(),
            exp.create_job(
                "custom",
                cluster=cluster,
                toolkit="custom",
                command_line=command(lab, custom),
                secrets={"TOKEN": "s3"},
            ).submit(),
        ]
    for job in jobs:
        assert job.wait(timeout=90, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    ran = runs(mpi)
    assert sorted(r["node"] for r in ran) == [f"{HEAD},{SECOND}"] * 2  # each rank once
    assert not any(under_agent(r) for r in ran), ran  # MPI's daemons over ssh (launcher.mpirun_via_agents)
    (one,) = runs(custom)
    assert under_agent(one) and one["token"] == 2, one  # the shim got the secret, not through argv


def test_an_agent_that_stops_answering_or_dies_is_passed_over_then_started_again(
    lab: Workspace,
    exp: Experiment,
    cluster: Cluster,
    ssh_nodes: SSHNodes,
    tmp_path: Path,
    stopped: list[int],
) -> None:
    out, again = tmp_path / "runs", tmp_path / "again"
    with held(lab, exp, cluster, ssh_nodes):
        (old,) = agents(ssh_nodes, SECOND)
        stopped.append(old)
        os.kill(old, signal.SIGSTOP)  # there, but silent: the job's preparation there goes over SSH
        job = exp.create_job(
            "fallback", cluster=cluster, node_count=2, command_line=command(lab, out)
        ).submit()
    assert job.wait(timeout=120, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(r["node"] for r in runs(out)) == [f"{HEAD},{SECOND}"] * 2  # once on each node
    with held(lab, exp, cluster, ssh_nodes):
        os.kill(old, signal.SIGKILL)
        wait_for(lambda: bool([p for p in agents(ssh_nodes, SECOND) if p != old]), 60, "a new agent")
        job = exp.create_job("again", cluster=cluster, toolkit="custom", command_line=command(lab, again))
        job.submit()
    assert job.wait(timeout=90, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    (ran,) = runs(again)
    assert under_agent(ran), ran


def running_custom(
    lab: Workspace,
    exp: Experiment,
    cluster: Cluster,
    name: str,
    out: Path,
    gate: Path,
    code: int = 0,
) -> Job:
    """A custom-toolkit job whose command runs (started by a node agent), waits for ``gate`` and exits
    with ``code``."""
    line = command(lab, out, gate, code)
    job = exp.create_job(name, cluster=cluster, toolkit="custom", command_line=line)
    job.submit()
    wait_for(lambda: bool(runs(out)) or job.state.ended, 60, "the command to run")
    assert under_agent(runs(out)[0]), runs(out)
    return job


def test_jobs_whose_agents_are_killed_while_they_run_go_on_and_end_once(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    custom, mpi, gate = tmp_path / "custom", tmp_path / "mpi", tmp_path / "go"
    with held(lab, exp, cluster, ssh_nodes):
        first = running_custom(lab, exp, cluster, "killed-custom", custom, gate)
        second = exp.create_job("killed-mpi", cluster=cluster, command_line=command(lab, mpi, gate)).submit()
    wait_for(lambda: bool(runs(mpi)) or second.state.ended, 60, "the MPI job to run")
    for pid in agents(ssh_nodes, HEAD) + agents(ssh_nodes, SECOND):
        os.kill(pid, signal.SIGKILL)
    gate.touch()
    for job in (first, second):
        assert job.wait(timeout=90, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
        assert job.exit_code == 0
    assert len(runs(custom)) == 1 and len(runs(mpi)) == 1


def test_a_job_whose_agent_is_stopped_while_it_runs_ends_once_with_its_exit_code(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    out, gate = tmp_path / "runs", tmp_path / "go"
    with held(lab, exp, cluster, ssh_nodes):
        job = running_custom(lab, exp, cluster, "stopped", out, gate, code=3)
    stopped = agent_of(runs(out)[0])
    assert stopped is not None
    os.kill(stopped, signal.SIGSTOP)  # alive but silent: no exit report, no beat
    try:
        wait_for(lambda: state(stopped) == "T", 30, "the agent to be stopped")  # SIGSTOP acts when it runs
        gate.touch()  # the command ends while its agent cannot reap it (a zombie there)
        assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
        assert job.exit_code == 3, job.status.failure_reason  # the shim's own record, not ssh's 255
        assert "hang" not in (job.status.failure_reason or "")
        assert len(runs(out)) == 1
        # the scheduler hears no beat from it either: it starts another there, the stopped one still stopped
        node = runs(out)[0]["node"]
        wait_for(lambda: bool([p for p in agents(ssh_nodes, node) if p != stopped]), 60, "a new agent there")
        assert state(stopped) == "T"
    finally:
        os.kill(stopped, signal.SIGKILL)


def test_terminate_ends_a_command_started_by_an_agent(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    out, gate = tmp_path / "runs", tmp_path / "never"
    with held(lab, exp, cluster, ssh_nodes):
        job = running_custom(lab, exp, cluster, "stop", out, gate)
        job.terminate(timeout=60)
    assert job.state is JobState.TERMINATED


def test_kill_9_of_the_scheduler_leaves_no_agent_and_no_second_start(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    state = lab_root(lab) / "node_state" / "tmp" / "scheduler" / "c"
    ssh = ["ssh", "-F", str(lab_root(lab) / "node_state" / "clusters" / "c" / "ssh_config")]
    sockets = [Path(socket_path(agent_name(ssh, a))) for a in (HEAD, SECOND)]
    out, gate = tmp_path / "runs", tmp_path / "go"
    with held(lab, exp, cluster, ssh_nodes):
        job = running_custom(lab, exp, cluster, "held", out, gate)
        before = set(agents(ssh_nodes, HEAD) + agents(ssh_nodes, SECOND))
        pid = scheduler_pid(state)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        # its agents take nothing more at once; the one whose command runs stays until that command ends
        wait_for(lambda: not any(s.exists() for s in sockets), 30, "the agents to stop listening")
        lab.backend.scheduler(cluster.spec).ensure_running()
        gate.touch()
    assert job.wait(timeout=90, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
    assert len(runs(out)) == 1  # started once, across both schedulers
    wait_for(
        lambda: not set(agents(ssh_nodes, HEAD) + agents(ssh_nodes, SECOND)) & before, 30, "old agents to go"
    )
