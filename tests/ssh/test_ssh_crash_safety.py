"""The scheduler around its own failures on real sshd nodes (127.0.0.2 head, 127.0.0.3): kill -9 of the
scheduler in its launch window never starts a job twice; a lost ``sched.db`` under running jobs never lets
a queued job onto a node before every process of the lost ones there is ended; a stopped node is named,
and a silent job whose nodes answer ends as a hang with each node's stacks."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes
from test_ssh_scheduler import comm, descendants

from _labs import scheduler_states, ssh_lab
from _procs import pid_alive, wait_for
from _scheduler_procs import kill_scheduler_at_launch, scheduler_pid
from batchai_sdk import Job, JobState, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]

# A rank that writes its node and pid, then sleeps until it is ended.
HOLD = """
import json, os, sys, time
node = os.environ["BATCHAI_JOB_NODES"]
with open(os.path.join(sys.argv[1], os.environ["AZ_BATCHAI_JOB_NAME"] + ".json"), "w") as f:
    f.write(json.dumps({"node": node, "pid": os.getpid()}))
time.sleep(300)
"""

# A rank that records whether a process of an earlier job still ran on its node when it started.
CHECK = """
import glob, json, os, sys
node, out = os.environ["BATCHAI_JOB_NODES"], sys.argv[1]
shared = []
for path in glob.glob(os.path.join(out, "*.json")):
    held = json.load(open(path))
    if held["node"] == node:
        try:
            state = open(f"/proc/{held['pid']}/stat").read().rsplit(") ", 1)[1].split()[0]
        except OSError:
            state = "gone"
        if state not in ("gone", "Z"):
            shared.append(path)
with open(os.path.join(out, "ran-" + os.environ["AZ_BATCHAI_JOB_NAME"]), "w") as f:
    f.write(json.dumps(shared))
"""


lab = ssh_lab([HEAD, SECOND], "crash")


def _fresh(lab: Workspace, name: str) -> tuple[Workspace, Experiment, Cluster, Path]:
    """An experiment and a 2-node cluster of their own, and the folder of that cluster's scheduler."""
    ws, sched_root = lab, scheduler_states(lab)
    return (
        ws,
        ws.create_experiment(name),
        ws.create_cluster(name, vm_size="Standard_NC6", nodes=2),
        sched_root / name,
    )


def test_kill_9_in_the_launch_window_over_ssh_never_starts_a_job_twice(
    lab: Workspace, tmp_path: Path
) -> None:
    ws, exp, cluster, state = _fresh(lab, "k")
    runs = tmp_path / "runs"
    runs.mkdir()
    jobs, killed = [], 0
    for i in range(6):
        hits: list[bool] = []
        killer = threading.Thread(target=lambda h=hits: h.append(kill_scheduler_at_launch(state)))
        killer.start()
        cmd = f"echo ran-$$ >> {runs}/k{i}; exit 5"
        jobs.append(exp.create_job(f"k{i}", cluster=cluster, command_line=cmd).submit())
        killer.join()
        killed += sum(hits)
    ws.backend.scheduler(cluster.spec).ensure_running()
    for i, job in enumerate(jobs):
        assert job.wait(timeout=90, poll_interval=0.2) is JobState.FAILED
        assert len((runs / f"k{i}").read_text().splitlines()) == 1, f"k{i} ran twice"
        assert job.exit_code == 5, job.status.failure_reason
    assert killed == 6


def test_a_lost_database_over_ssh_never_shares_a_node(lab: Workspace, tmp_path: Path) -> None:
    ws, exp, cluster, state = _fresh(lab, "f")
    out = tmp_path / "out"
    out.mkdir()
    hold, check = tmp_path / "hold.py", tmp_path / "check.py"
    hold.write_text(textwrap.dedent(HOLD))
    check.write_text(textwrap.dedent(CHECK))
    holders = [
        exp.create_job(
            n, cluster=cluster, command_line=f"{shlex.quote(sys.executable)} {hold} {out}"
        ).submit()
        for n in ("a", "b")
    ]
    wait_for(lambda: all((out / f"{n}.json").exists() for n in ("a", "b")), 60, "both jobs to run")
    pids = {n: read_pid_json(out / f"{n}.json") for n in ("a", "b")}
    waiting = [
        exp.create_job(
            n, cluster=cluster, command_line=f"{shlex.quote(sys.executable)} {check} {out}"
        ).submit()
        for n in ("c", "d")
    ]
    old = scheduler_pid(state)
    assert old is not None
    (state / "sched.db").unlink()
    wait_for(lambda: not pid_alive(old), 30, "the scheduler to notice its database is gone")
    ws.backend.scheduler(cluster.spec).ensure_running()
    for job in waiting:
        assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    for n in ("c", "d"):
        assert json.loads((out / f"ran-{n}").read_text()) == [], f"{n} shared a node with a lost job"
    for job in holders:
        assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
        assert "database" in (job.status.failure_reason or ""), job.status.failure_reason
    assert not any(pid_alive(p) for p in pids.values())


def read_pid_json(path: Path) -> int:
    wait_for(lambda: path.read_text().endswith("}"), 10, f"{path} to be whole")
    return int(json.loads(path.read_text())["pid"])


# A rank that writes its pid, then sleeps in a function its stacks name.
QUIET = """
import faulthandler, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
with open(os.path.join(sys.argv[1], "up-" + os.environ["OMPI_COMM_WORLD_RANK"]), "w") as f:
    f.write(str(os.getpid()))
def wait_forever():
    time.sleep(300)
wait_forever()
"""


def _silent_job(exp: Experiment, cluster: Cluster, tmp_path: Path, name: str) -> tuple[Job, Path]:
    """A 2-node job of QUIET ranks (silent once up), failed after 3 s of silence; and where its ranks
    say they are up."""
    out = tmp_path / "out"
    out.mkdir()
    quiet = tmp_path / "quiet.py"
    quiet.write_text(textwrap.dedent(QUIET))
    job = exp.create_job(
        name,
        cluster=cluster,
        node_count=2,
        hang_timeout=3,
        command_line=f"{shlex.quote(sys.executable)} {quiet} {out}",
    ).submit()
    return job, out


def test_a_stopped_node_is_named_not_taken_for_a_hang(
    lab: Workspace, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    _, exp, cluster, state = _fresh(lab, "s")
    job, out = _silent_job(exp, cluster, tmp_path, "frozen")
    wait_for(lambda: len(list(out.glob("up-*"))) == 2, 60, "both ranks to run")
    sshd = ssh_nodes.nodes[SECOND].process
    assert sshd is not None
    # The second node's sshd and everything of the job under it. Not a login shell that runs there now:
    # the nodes share this machine's ~/.pyenv, and a shell stopped inside pyenv's rehash would hold its lock
    # and stall every other node's shell for 60 s (separate machines share no such lock).
    frozen = [sshd.pid, *(p for p in descendants(sshd.pid) if not comm(p).startswith(("bash", "pyenv")))]
    log = state / "scheduler.log"
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: f"node {SECOND} stopped answering" in log.read_text(), 60, "the stopped node named")
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert job.wait(timeout=90, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert f"node {SECOND} stopped answering" in reason and "possible hang" not in reason, reason
    assert f"node {HEAD} stopped answering" not in reason, reason  # the node that answers is not named
    assert [a["cause"] for a in job.attempts] == ["node_lost"]


def test_a_silent_job_over_ssh_ends_as_a_hang_with_each_nodes_stacks(lab: Workspace, tmp_path: Path) -> None:
    _, exp, cluster, _ = _fresh(lab, "h")
    job, _ = _silent_job(exp, cluster, tmp_path, "stuck")
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    # every node answers: a hang, not a lost node (both nodes were named stopped before the fix)
    assert "(possible hang); stacks in stacks-" in reason and "stopped answering" not in reason, reason
    assert [a["cause"] for a in job.attempts] == ["hang"]
    assert len(job.status.nodes) == 2
    for node in job.status.nodes:
        stacks = job.tail(f"stacks-{node}.txt", 50)
        assert any("quiet.py" in line for line in stacks), (node, stacks)
