"""The local hand-off's fast paths and their fallbacks, with a real scheduler and real processes: the next
job is handed to the launcher started ahead for it (scheduler/spares.py), and a spare that is gone is
replaced by a launcher of the job's own; a local custom job's command runs under a shim forked from its
launcher (job/forked.py), not a new Python."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from _procs import pid_alive, wait_for
from _scheduler_procs import job_row, ppid, state_dir
from batchai_sdk import JobState, Workspace

WAIT = "while [ ! -e {gate} ]; do sleep 0.05; done"


def argv_of(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def scheduler_pid(ws: Workspace) -> int:
    (pid,) = [p for p in pids() if argv_of(p)[3:5] == [b"scheduler", bytes(state_dir(ws))]]
    return pid


def spare_launcher(ws: Workspace, running: int) -> int | None:
    """The scheduler's launcher waiting for a job (``launch -``), not the running job's (``running``)."""
    sched = scheduler_pid(ws)
    found = [p for p in pids() if argv_of(p)[3:5] == [b"launch", b"-"] and ppid(p) == sched and p != running]
    return found[0] if len(found) == 1 else None


def held_cluster(ws: Workspace, tmp_path: Path) -> tuple[Any, Any, Path, int]:
    """A one-node cluster held by a job until ``gate`` exists, and its spare launcher waiting:
    (experiment, cluster, gate, the spare's pid)."""
    gate = tmp_path / "gate"
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    holder = exp.create_job("holder", cluster=cluster, command_line=WAIT.format(gate=gate)).submit()
    wait_for(lambda: holder.state is JobState.RUNNING, 60, "the holder to run")
    running = job_row(ws, "holder")["launcher_pid"]
    wait_for(lambda: spare_launcher(ws, running) is not None, 60, "the spare launcher")
    spare = spare_launcher(ws, running)
    assert spare is not None
    return exp, cluster, gate, spare


def test_the_next_job_is_handed_to_the_launcher_started_ahead_for_it(ws: Workspace, tmp_path: Path) -> None:
    exp, cluster, gate, spare = held_cluster(ws, tmp_path)
    nxt = exp.create_job("next", cluster=cluster, command_line="echo next").submit()
    gate.touch()
    assert nxt.wait(timeout=60) is JobState.SUCCEEDED
    assert job_row(ws, "next")["launcher_pid"] == spare  # no launcher started in the hand-off
    assert [(a["index"], a["exit_code"]) for a in nxt.attempts] == [(0, 0)]


def test_a_spare_launcher_that_is_gone_is_replaced_by_a_launcher_of_the_jobs_own(
    ws: Workspace, tmp_path: Path
) -> None:
    exp, cluster, gate, spare = held_cluster(ws, tmp_path)
    nxt = exp.create_job("next", cluster=cluster, command_line="echo next").submit()
    os.kill(spare, signal.SIGKILL)
    wait_for(lambda: not pid_alive(spare), 30, "the spare to die")
    gate.touch()
    assert nxt.wait(timeout=60) is JobState.SUCCEEDED, nxt.status.failure_reason
    launcher = job_row(ws, "next")["launcher_pid"]
    assert launcher and launcher != spare
    assert [(a["index"], a["exit_code"]) for a in nxt.attempts] == [(0, 0)]  # once, not a failed attempt


def test_a_local_custom_jobs_command_runs_under_a_shim_forked_from_its_launcher(
    ws: Workspace, tmp_path: Path
) -> None:
    gate, mark = tmp_path / "gate", f"forked-{os.getpid()}"
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    job = exp.create_job(
        "custom", cluster=cluster, toolkit="custom", command_line=f"{WAIT.format(gate=gate)}; : {mark}"
    ).submit()

    def command() -> int | None:
        found = [p for p in pids() if mark.encode() in b" ".join(argv_of(p)) and b"sh" in argv_of(p)[0]]
        return found[0] if found else None

    wait_for(lambda: command() is not None, 60, "the job's command")
    pid = command()
    assert pid is not None
    shim = ppid(pid)
    launcher = job_row(ws, "custom")["launcher_pid"]
    assert ppid(shim) == launcher  # the shim is the launcher's child ...
    assert argv_of(shim) == argv_of(launcher)  # ... forked from it: no new Python, no "rank" command line
    assert b"rank" not in argv_of(shim)
    gate.touch()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
