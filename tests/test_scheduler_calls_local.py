"""How a local client reaches its cluster's scheduler: on the scheduler's socket while it answers there
(no process started per request), through ``ctl`` when it does not (not running, killed -9 with its
socket left, or a socket path too long to connect to), which starts it. Real scheduler, real processes."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from _procs import pid_alive, wait_for
from batchai_sdk import JobState, Workspace


def children_cpu() -> float:
    """CPU seconds of this process's ended children: a ``ctl`` run per request shows here."""
    times = os.times()
    return times.children_user + times.children_system


def scheduler_pids(ws: Workspace) -> list[int]:
    state = bytes(ws.backend.root / "tmp" / "scheduler" / "c")  # type: ignore[attr-defined]
    found = []
    for entry in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.isdigit() and argv[3:5] == [b"scheduler", state]:
            found.append(int(entry))
    return found


def test_requests_to_a_running_local_scheduler_start_no_process(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    hold = exp.create_job("hold", cluster=cluster, command_line="sleep 2").submit()
    wait_for(lambda: len(scheduler_pids(ws)) == 1, what="the scheduler")
    before = children_cpu()
    jobs = [exp.create_job(f"j{i}", cluster=cluster, command_line="true").submit() for i in range(4)]
    assert jobs[0].terminate(timeout=60) is JobState.TERMINATED
    assert children_cpu() == before  # submits and a terminate, each on the socket: no ctl started
    assert hold.wait(timeout=60) is JobState.SUCCEEDED
    assert [j.wait(timeout=60) for j in jobs[1:]] == [JobState.SUCCEEDED] * 3


def test_a_scheduler_killed_with_its_socket_left_is_started_again_through_ctl(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    assert exp.create_job("first", cluster=cluster, command_line="true").submit().wait(timeout=60) is (
        JobState.SUCCEEDED
    )
    (old,) = scheduler_pids(ws)
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: not pid_alive(old), 30, "the scheduler to die")
    sock = ws.backend.root / "tmp" / "scheduler" / "c" / "sched.sock"  # type: ignore[attr-defined]
    assert sock.exists()  # nobody answers on it now
    before = children_cpu()
    again = exp.create_job("again", cluster=cluster, command_line="true").submit()
    assert children_cpu() > before  # ctl ran, and started the scheduler
    assert again.wait(timeout=60) is JobState.SUCCEEDED
    (new,) = scheduler_pids(ws)
    assert new != old


def test_a_scheduler_whose_socket_path_is_too_long_to_connect_to_is_reached_through_ctl(
    tmp_path: Path,
) -> None:
    root = tmp_path / ("long-" + "x" * 60) / ("y" * 40)  # the socket's path passes AF_UNIX's 108 bytes
    with Workspace.local(root=root) as ws:
        exp = ws.create_experiment("e")
        cluster = ws.create_cluster("c", nodes=1)
        first = exp.create_job("first", cluster=cluster, command_line="sleep 2").submit()
        wait_for(lambda: len(scheduler_pids(ws)) == 1, what="the scheduler")
        sock = root / "tmp" / "scheduler" / "c" / "sched.sock"
        assert len(bytes(sock)) >= 108 and sock.exists()
        before = children_cpu()
        second = exp.create_job("second", cluster=cluster, command_line="echo second").submit()
        assert children_cpu() > before  # through ctl, which connects by the socket's short name
        assert first.wait(timeout=60) is JobState.SUCCEEDED
        assert second.wait(timeout=60) is JobState.SUCCEEDED
