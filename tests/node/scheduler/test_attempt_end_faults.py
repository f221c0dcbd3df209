"""The scheduler under faults a user lives through, with real processes on the local backend: its own disk
full mid-job (a small tmpfs), a status record gone stale while the scheduler is alive, a killed launcher
and a killed mpirun. A final state is final, and every reason names the true culprit."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from _procs import pid_alive, wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import JobState, Workspace
from batchai_sdk._models import parse_time, utcnow
from batchai_sdk.node.job import procs

pytestmark = pytest.mark.mpi

GATED = "touch {out}/up; while [ ! -e {out}/go ]; do sleep 0.05; done; echo done; exit 5"


@pytest.fixture
def small_head_disk(ws: Workspace) -> Iterator[Path]:
    """The scheduler's own folder on a 4 MiB tmpfs (root only; skipped where mounting is refused)."""
    state = ws.backend.root / "tmp" / "scheduler" / "c"  # type: ignore[attr-defined]
    state.mkdir(parents=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(state)], capture_output=True, check=False
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip() or res.returncode}")
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_head_disk_keeps_the_scheduler_alive_and_the_true_exit_code(
    ws: Workspace, tmp_path: Path, small_head_disk: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("five", cluster=cluster, command_line=GATED.format(out=out)).submit()
    wait_for(lambda: (out / "up").exists(), 60, "the job to run")
    sched = scheduler_pid(small_head_disk)
    assert sched is not None
    filler = _fill(small_head_disk)
    (out / "go").touch()  # the job exits 5 while the scheduler's disk is full
    nodes_json = ws.share.root / ".batchai" / "clusters" / "c" / "nodes.json"  # type: ignore[attr-defined]

    def reported() -> bool:
        doc = json.loads(nodes_json.read_text())
        return "full" in str(doc.get("head_disk_error", ""))

    wait_for(reported, 60, "the scheduler to report its full disk on the share")
    assert pid_alive(sched)  # it lives through it
    assert job.state is not JobState.SUCCEEDED
    filler.unlink()  # space returns
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    assert job.exit_code == 5, job.status.failure_reason
    assert "launcher" not in (job.status.failure_reason or ""), job.status.failure_reason
    assert scheduler_pid(small_head_disk) in (sched, None)  # the same scheduler (or none, once idle)


def test_a_stale_record_of_a_job_its_live_scheduler_runs_is_not_lost(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("BATCHAI_HEARTBEAT_TIMEOUT", "1")  # the scheduler beats every 10 s
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("slow", cluster=cluster, command_line=GATED.format(out=out)).submit()
    wait_for(lambda: (out / "up").exists(), 60, "the job to run")
    status_json = ws.share.root / ".batchai" / "experiments" / "e" / "jobs" / "slow" / "status.json"  # type: ignore[attr-defined]

    def stale() -> bool:
        beat = parse_time(json.loads(status_json.read_text()).get("heartbeat"))
        return beat is not None and (utcnow() - beat).total_seconds() > 1.5

    wait_for(stale, 30, "the record's heartbeat to be older than the timeout")
    status = job.status
    assert status.state is JobState.RUNNING and not status.lost, status
    (out / "go").touch()
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    assert job.exit_code == 5
    assert "wrapper" not in (job.status.failure_reason or "")


def test_a_killed_launcher_fails_the_job_naming_the_launcher_and_is_not_retried_as_a_lost_node(
    ws: Workspace, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("ko", cluster=cluster, command_line=GATED.format(out=out), max_retries=2).submit()
    wait_for(lambda: (out / "up").exists(), 60, "the job to run")
    tag = _tag_of_up_job(out)
    launcher = next(p for p in procs.tagged_pids(tag) if b"launch" in Path(f"/proc/{p}/cmdline").read_bytes())
    os.kill(launcher, signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert "launcher was killed by signal 9" in reason and "wrapper" not in reason, reason
    assert [a["cause"] for a in job.attempts] == ["exit"]  # not requeued as a lost node
    assert (out / "up").exists() and procs.tagged_pids(tag) == []


def _tag_of_up_job(out: Path) -> str:
    """The tag of the gated job's shell (the process that touched ``up``), from its environment."""
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            if str(out).encode() + b"/go" in cmd:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                for e in environ:
                    if e.startswith(b"BATCHAI_JOB_TAG="):
                        return e.split(b"=", 1)[1].decode()
    raise AssertionError("the job's shell was not found")


def test_a_killed_mpirun_is_named_as_the_culprit(ws: Workspace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job(
        "mpi", cluster=cluster, toolkit="custommpi", process_count=1, command_line=GATED.format(out=out)
    ).submit()
    wait_for(lambda: (out / "up").exists(), 60, "the ranks to run")
    tag = _tag_of_up_job(out)
    mpirun = next(
        p
        for p in procs.tagged_pids(tag)
        if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].endswith(b"mpirun")
    )
    os.kill(mpirun, signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert "mpirun was killed by signal 9" in reason and "wrapper" not in reason, reason
    wait_for(lambda: procs.tagged_pids(tag) == [], 30, "every process of the job to end")


def test_a_stale_record_of_a_job_that_ended_reads_as_its_scheduler_ended_it(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("done", cluster=cluster, command_line="exit 4").submit()
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    status_json = ws.share.root / ".batchai" / "experiments" / "e" / "jobs" / "done" / "status.json"  # type: ignore[attr-defined]
    record = json.loads(status_json.read_text())
    stale = {k: v for k, v in record.items() if k not in ("end_time", "exit_code", "failure_reason")}
    stale.update(state="running", heartbeat="2026-01-01T00:00:00+00:00")  # as a full share left it
    status_json.write_text(json.dumps(stale))
    monkeypatch.setenv("BATCHAI_HEARTBEAT_TIMEOUT", "1")
    status = job.status  # the scheduler (started again if it went idle) still knows how it ended
    assert (status.state, status.exit_code, status.lost) == (JobState.FAILED, 4, False), status
