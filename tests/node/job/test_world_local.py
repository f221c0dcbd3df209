"""The queue head's MPI world started ahead (node/job/world.py), with real mpirun and real processes: a
job run in it runs once, with its ranks' variables, output files, exit code and culprit as without it;
a world whose job is terminated, or whose scheduler is killed -9, ends and leaves no process; the job
then runs once, later, in an mpirun of its own."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from _procs import pid_alive, started_at, still_running, wait_for
from _scheduler_procs import job_row, ppid, state_dir
from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.mpi

WAIT = "while [ ! -e {gate} ]; do sleep 0.05; done"
# one file per rank, created exclusively: a second run of the job fails instead of overwriting it
RECORD = (
    "set -o noclobber; "
    'echo "$AZ_BATCHAI_TASK_INDEX $BATCHAI_JOB_NODES $OMPI_COMM_WORLD_SIZE" > {out}/{name}-$OMPI_COMM_WORLD_RANK'
    ' && echo "hello from rank $OMPI_COMM_WORLD_RANK"'
)


def processes_with(*marks: bytes) -> list[int]:
    """Pids whose command line holds every one of ``marks``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if all(mark in argv for mark in marks):
            found.append(int(entry))
    return found


def world_shims(ws: Workspace) -> list[int]:
    return [
        p
        for p in processes_with(b"rank\0--world\0", bytes(state_dir(ws)))
        if p not in processes_with(b"mpirun")
    ]


def node_logs(ws: Workspace, name: str) -> str:
    logs = ws.backend.root.glob(  # type: ignore[attr-defined]
        f"mounts/share/.batchai/experiments/e/jobs/{name}/stdouterr/execution-*.log"
    )
    return "".join(p.read_text() for p in logs)


def stdout_of(ws: Workspace, name: str) -> str:
    path = ws.backend.root / f"mounts/share/.batchai/experiments/e/jobs/{name}/stdouterr/stdout.txt"  # type: ignore[attr-defined]
    return path.read_text() if path.exists() else ""


def test_queued_mpi_jobs_run_once_each_in_the_world_started_for_them(ws: Workspace, tmp_path: Path) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    holder = exp.create_job("holder", cluster=cluster, node_count=2, command_line=WAIT.format(gate=gate))
    holder.submit()
    fail = exp.create_job(
        "fail", cluster=cluster, command_line="sleep 1; echo 'error: bad input' >&2; exit 3"
    )
    fail.submit()
    two = exp.create_job(
        "two", cluster=cluster, node_count=2, command_line=RECORD.format(out=out, name="two")
    ).submit()
    wait_for(lambda: len(world_shims(ws)) == 1, 60, "the world of the queue head (fail) started ahead")
    gate.touch()
    assert holder.wait(timeout=120) is JobState.SUCCEEDED
    assert fail.wait(timeout=120) is JobState.FAILED
    assert fail.exit_code == 3
    assert "rank 0 on node" in (fail.status.failure_reason or "")
    assert "exited with code 3: error: bad input" in (fail.status.failure_reason or "")
    assert two.wait(timeout=120) is JobState.SUCCEEDED
    for name in ("fail", "two"):
        assert "the job runs in the MPI world started ahead" in node_logs(ws, name), name
    records = {p.name: p.read_text().split() for p in out.iterdir()}
    assert sorted(records) == ["two-0", "two-1"]
    assert [records["two-0"][0], records["two-1"][0]] == ["0", "1"]  # AZ_BATCHAI_TASK_INDEX per node
    assert all(r[2] == "2" for r in records.values())  # one world of two ranks
    assert records["two-0"][1] == records["two-1"][1] and len(records["two-0"][1].split(",")) == 2
    text = stdout_of(ws, "two")
    assert "hello from rank 0" in text and "hello from rank 1" in text
    assert (
        "error: bad input"
        in (
            ws.backend.root / "mounts/share/.batchai/experiments/e/jobs/fail/stdouterr/stderr.txt"  # type: ignore[attr-defined]
        ).read_text()
    )
    wait_for(lambda: not processes_with(bytes(tmp_path), b"batchai_node"), 60, "nothing left once idle")


def held_with_a_queue_head(ws: Workspace, tmp_path: Path) -> tuple[Path, Path, Any, Any, Any, Any]:
    """A one-node cluster held by a job until ``gate`` exists, and a queued job ("head", writing its
    rank's record to ``out``) whose world is up: (out, gate, experiment, cluster, holder, head)."""
    out, gate = tmp_path / "out", tmp_path / "gate"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    holder = exp.create_job("holder", cluster=cluster, command_line=WAIT.format(gate=gate)).submit()
    head = exp.create_job("head", cluster=cluster, command_line=RECORD.format(out=out, name="head")).submit()
    wait_for(lambda: len(world_shims(ws)) == 1, 60, "the queue head's world")
    return out, gate, exp, cluster, holder, head


def test_a_terminated_queue_head_ends_its_world_and_a_job_in_a_world_is_terminated_whole(
    ws: Workspace, tmp_path: Path
) -> None:
    out, gate, exp, cluster, holder, head = held_with_a_queue_head(ws, tmp_path)
    shims = [(pid, started_at(pid)) for pid in world_shims(ws)]
    assert head.terminate(timeout=60) is JobState.TERMINATED
    wait_for(lambda: not world_shims(ws), 30, "the terminated head's world to end")
    # ended (its mpirun may not have reaped it yet: a zombie has ended; its pid may be another's by now)
    wait_for(lambda: not any(still_running(*shim) for shim in shims), 30, "the head's shim to end")
    pidfile = tmp_path / "pid"
    long = exp.create_job("long", cluster=cluster, command_line=f"echo $$ > {pidfile}; exec sleep 300")
    long.submit()
    wait_for(lambda: len(world_shims(ws)) == 1, 60, "the next head's world")
    gate.touch()
    assert holder.wait(timeout=60) is JobState.SUCCEEDED
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip() != "", 60, "the job in the world")
    pid = int(pidfile.read_text())
    start = started_at(pid)
    assert "the job runs in the MPI world started ahead" in node_logs(ws, "long")
    assert long.terminate(timeout=60) is JobState.TERMINATED
    assert not still_running(pid, start)
    assert list(out.iterdir()) == []  # the terminated head never ran
    wait_for(lambda: not processes_with(bytes(tmp_path), b"batchai_node"), 60, "nothing left once idle")
    assert not processes_with(b"mpirun", bytes(state_dir(ws)))


def test_kill_9_of_the_scheduler_ends_the_world_and_the_job_runs_once_later(
    ws: Workspace, tmp_path: Path
) -> None:
    out, gate, exp, cluster, holder, head = held_with_a_queue_head(ws, tmp_path)
    (sched,) = processes_with(b"scheduler\0" + bytes(state_dir(ws)))
    os.kill(sched, signal.SIGKILL)
    wait_for(lambda: not world_shims(ws), 30, "the world of a killed scheduler's spare to end")
    exp.create_job("after", cluster=cluster, command_line="true").submit()  # starts a scheduler again
    gate.touch()
    assert holder.wait(timeout=60) is JobState.SUCCEEDED  # adopted: it ran on without a scheduler
    assert head.wait(timeout=60) is JobState.SUCCEEDED
    assert [p.name for p in out.iterdir()] == ["head-0"]  # once (a second run could not create it)
    wait_for(lambda: not processes_with(bytes(tmp_path), b"batchai_node"), 60, "nothing left once idle")


def test_a_job_given_a_world_of_another_shape_ends_it_and_starts_its_own_mpirun(
    ws: Workspace, tmp_path: Path
) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    holder = exp.create_job("holder", cluster=cluster, command_line=WAIT.format(gate=gate)).submit()
    wide = exp.create_job(
        "wide", cluster=cluster, node_count=2, command_line=RECORD.format(out=out, name="wide")
    )
    wide.submit()
    wait_for(lambda: len(world_shims(ws)) == 2, 60, "the two-rank world of the queue head")
    first = set(world_shims(ws))
    # a short job fits on the free node without delaying the head (backfill): it takes the spare,
    # whose world has two ranks where it needs one
    small = exp.create_job(
        "small", cluster=cluster, command_line=RECORD.format(out=out, name="small"), max_wall_clock_time=120
    ).submit()
    assert small.wait(timeout=60) is JobState.SUCCEEDED
    assert "the job runs in the MPI world started ahead" not in node_logs(ws, "small")
    assert not first & set(world_shims(ws))  # that world ended; the head's next one is a new one
    gate.touch()
    assert holder.wait(timeout=60) is JobState.SUCCEEDED
    assert wide.wait(timeout=60) is JobState.SUCCEEDED
    assert sorted(p.name for p in out.iterdir()) == ["small-0", "wide-0", "wide-1"]  # each rank once
    wait_for(lambda: not processes_with(bytes(tmp_path), b"batchai_node"), 60, "nothing left once idle")


def test_a_scheduler_killed_before_its_spare_got_the_job_leaves_it_queued_not_failed(
    ws: Workspace, tmp_path: Path
) -> None:
    out, gate, _exp, cluster, holder, head = held_with_a_queue_head(ws, tmp_path)
    (sched,) = processes_with(b"scheduler\0" + bytes(state_dir(ws)))
    running = job_row(ws, "holder")["launcher_pid"]  # a launcher that was a spare too
    (spare,) = [p for p in processes_with(b"launch\0-\0") if ppid(p) == sched and p != running]
    # the spare (it carries the head's tag) is frozen with its stdin full: the scheduler that hands it the
    # head records the launch as starting, then blocks writing the job's folder, which never gets there
    os.kill(spare, signal.SIGSTOP)  # stopped once /proc says so: until then it may still read its stdin
    wait_for(lambda: Path(f"/proc/{spare}/stat").read_text().rsplit(") ", 1)[1][0] == "T", 30, "a stop")
    stdin = os.open(f"/proc/{spare}/fd/0", os.O_WRONLY | os.O_NONBLOCK)
    try:
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(stdin, b"world null\n")
        gate.touch()
        wait_for(lambda: job_row(ws, "head").get("phase") == "starting", 60, "the head's launch recorded")
        assert job_row(ws, "head")["tag"].encode() in Path(f"/proc/{spare}/environ").read_bytes()
        os.kill(sched, signal.SIGKILL)
        wait_for(lambda: not pid_alive(sched), 30, "the scheduler to die")
        ws.backend.scheduler(cluster.spec).ensure_running()  # type: ignore[attr-defined]
        assert job_row(ws, "head")["launcher_pid"] == spare  # the new one took the spare for its launcher
    finally:
        os.close(stdin)
        os.kill(spare, signal.SIGCONT)  # it reads to the end of its stdin, without a job, and exits
    assert holder.wait(timeout=60) is JobState.SUCCEEDED
    assert head.wait(timeout=60) is JobState.SUCCEEDED, head.status.failure_reason
    assert [p.name for p in out.iterdir()] == ["head-0"]  # once (a second run could not create it)
    # the launch that never began is no attempt: the one run is the job's first
    assert [(a["index"], a["exit_code"]) for a in head.attempts] == [(0, 0)]
    wait_for(lambda: not processes_with(bytes(tmp_path), b"batchai_node"), 60, "nothing left once idle")


RECVFROM = {"x86_64": 45, "aarch64": 207}  # the system call a shim waits in, connected, for its job


def waits_for_its_job(pid: int) -> bool:
    """Whether the shim ``pid`` is connected to its world and blocked reading the job (/proc/PID/syscall)."""
    try:
        call = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return call.isdigit() and int(call) == RECVFROM.get(os.uname().machine, -1)


def test_a_stopped_waiting_shim_is_found_and_its_world_discarded_before_the_hand_off(
    ws: Workspace, tmp_path: Path
) -> None:
    out, gate = tmp_path / "out", tmp_path / "gate"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    holder = exp.create_job("holder", cluster=cluster, command_line=WAIT.format(gate=gate)).submit()
    wide = exp.create_job(
        "wide", cluster=cluster, node_count=2, command_line=RECORD.format(out=out, name="wide")
    )
    wide.submit()
    wait_for(lambda: len(world_shims(ws)) == 2, 60, "the two-rank world of the queue head")
    wait_for(lambda: all(waits_for_its_job(p) for p in world_shims(ws)), 60, "the shims to wait for a job")
    stopped = world_shims(ws)[0]
    os.kill(stopped, signal.SIGSTOP)  # it keeps its connection, but would never run its rank
    try:
        gate.touch()
        assert holder.wait(timeout=60) is JobState.SUCCEEDED
        assert wide.wait(timeout=60) is JobState.SUCCEEDED, wide.status.failure_reason
        assert sorted(p.name for p in out.iterdir()) == ["wide-0", "wide-1"]  # both ranks ran, once
        assert "the job runs in the MPI world started ahead" not in node_logs(ws, "wide")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
    wait_for(lambda: not pid_alive(stopped), 30, "the stopped shim to be ended with its world")
