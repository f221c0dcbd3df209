"""The scheduler around its own failures on real sshd nodes (127.0.0.2 head, 127.0.0.3): kill -9 of the
scheduler in its launch window never starts a job twice; a lost ``sched.db`` under running jobs never lets
a queued job onto a node before every process of the lost ones there is ended."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _helpers import pid_alive, wait_for
from batchai_sdk import JobState, Workspace

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


@pytest.fixture(scope="module")
def lab(ssh_nodes: SSHNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Path]]:
    root = tmp_path_factory.mktemp("crash")
    (root / "mnt" / "share").mkdir(parents=True)
    ws = ssh_nodes.workspace("crash", root, [HEAD, SECOND])
    yield ws, root / "node_state" / "tmp" / "scheduler"
    ws.close()


def _scheduler_pid(state: Path) -> int | None:
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.isdigit() and argv[3:5] == [b"scheduler", bytes(state)]:
            return int(entry)
    return None


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _execed(pid: int) -> bytes:
    """The child's command line once it exec'd (a fork shows its parent's until then); b"" when gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""
        if argv and b"scheduler" not in argv.split(b"\0")[3:4]:
            return argv
        time.sleep(0.001)
    raise AssertionError(f"child {pid} of the scheduler did not exec")


def _kill_at_launch(state: Path, timeout: float = 60) -> bool:
    """SIGSTOP the scheduler as soon as it forks a launcher, let the launcher exec, then kill -9 it."""
    deadline = time.monotonic() + timeout
    sched: int | None = None
    seen: set[int] = set()
    while time.monotonic() < deadline:
        if sched is None or not pid_alive(sched):
            sched, seen = _scheduler_pid(state), set()
            if sched is None:
                continue
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else 0
            if pid <= sched or pid in seen:
                continue
            seen.add(pid)
            if _ppid(pid) != sched:
                continue
            os.kill(sched, signal.SIGSTOP)
            if b"launch" not in _execed(pid).split(b"\0")[3:4]:  # ssh to a node, not a launcher
                os.kill(sched, signal.SIGCONT)
                continue
            os.kill(sched, signal.SIGKILL)
            return True
    return False


def test_kill_9_in_the_launch_window_over_ssh_never_starts_a_job_twice(
    lab: tuple[Workspace, Path], tmp_path: Path
) -> None:
    ws, sched_root = lab
    exp = ws.create_experiment("k")
    cluster = ws.create_cluster("k", vm_size="Standard_NC6", nodes=2)
    runs = tmp_path / "runs"
    runs.mkdir()
    jobs, killed = [], 0
    for i in range(6):
        hits: list[bool] = []
        killer = threading.Thread(target=lambda h=hits: h.append(_kill_at_launch(sched_root / "k")))
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


def test_a_lost_database_over_ssh_never_shares_a_node(lab: tuple[Workspace, Path], tmp_path: Path) -> None:
    ws, sched_root = lab
    exp = ws.create_experiment("f")
    cluster = ws.create_cluster("f", vm_size="Standard_NC6", nodes=2)
    out = tmp_path / "out"
    out.mkdir()
    hold, check = tmp_path / "hold.py", tmp_path / "check.py"
    hold.write_text(textwrap.dedent(HOLD))
    check.write_text(textwrap.dedent(CHECK))
    holders = [
        exp.create_job(n, cluster=cluster, command_line=f"{sys.executable} {hold} {out}").submit()
        for n in ("a", "b")
    ]
    wait_for(lambda: all((out / f"{n}.json").exists() for n in ("a", "b")), 60, "both jobs to run")
    pids = {n: read_pid_json(out / f"{n}.json") for n in ("a", "b")}
    waiting = [
        exp.create_job(n, cluster=cluster, command_line=f"{sys.executable} {check} {out}").submit()
        for n in ("c", "d")
    ]
    state = sched_root / "f"
    old = _scheduler_pid(state)
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
