"""The socket is the scheduler's, and terminate tells the truth. With the scheduler's socket removed,
replaced by a file, or linked to another listener under a running scheduler: a submit still goes through
within seconds (the scheduler binds its path again), and a secret never reaches the other listener. A
terminate the scheduler cannot answer raises a typed error and leaves the job running; ``terminated`` is
recorded only once the job's processes are ended."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _procs import pid_alive, read_pid, wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import Job, JobState, Workspace
from batchai_sdk.exceptions import BackendError, BatchAITimeoutError

SECRET = "s3cr3t-of-the-socket-test"


def _state(ws: Workspace, cluster: str) -> Path:
    return ws.backend.root / "tmp" / "scheduler" / cluster  # type: ignore[attr-defined,no-any-return]


def _long_job(ws: Workspace, tmp_path: Path, name: str = "long") -> tuple[Job, int]:
    exp = ws.create_experiment("e")
    pid_file = tmp_path / f"{name}.pid"
    job = exp.create_job(
        name, cluster="c", toolkit="custom", command_line=f"echo $$ > {pid_file}; exec sleep 300"
    )
    job.submit()
    return job, read_pid(pid_file, timeout=60)


@pytest.fixture
def running(ws: Workspace, tmp_path: Path) -> Iterator[tuple[Job, int]]:
    ws.create_cluster("c", nodes=2)
    job, pid = _long_job(ws, tmp_path)
    yield job, pid
    with_scheduler = scheduler_pid(_state(ws, "c"))
    if with_scheduler is not None:
        os.kill(with_scheduler, signal.SIGCONT)
    if pid_alive(pid):
        job.terminate(timeout=60)


@pytest.mark.parametrize("how", ["removed", "a regular file"])
def test_a_submit_goes_through_within_seconds_when_the_socket_path_was_removed_or_replaced(
    ws: Workspace, running: tuple[Job, int], how: str
) -> None:
    sock = _state(ws, "c") / "sched.sock"
    sock.unlink()
    if how == "a regular file":
        sock.write_text("not a socket")
    t = time.monotonic()
    job = ws.get_experiment("e").create_job("next", cluster="c", toolkit="custom", command_line="true")
    job.submit()
    assert time.monotonic() - t < 8
    assert job.wait(timeout=60) is JobState.SUCCEEDED


def test_a_secret_never_reaches_another_listener_at_the_socket_path(
    ws: Workspace, running: tuple[Job, int], tmp_path: Path
) -> None:
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other_path = tmp_path / "other.sock"
    other.bind(str(other_path))
    other.listen(8)
    other.settimeout(0.2)
    got = bytearray()
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            try:
                conn, _ = other.accept()
            except OSError:
                continue
            conn.settimeout(1)
            with conn:
                try:
                    got.extend(conn.recv(1 << 20))
                except OSError:
                    pass

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    sock = _state(ws, "c") / "sched.sock"
    try:
        sock.unlink()
        sock.symlink_to(other_path)
        job = ws.get_experiment("e").create_job(
            "secret", cluster="c", toolkit="custom", command_line="true", secrets={"API_TOKEN": SECRET}
        )
        job.submit()
        assert job.wait(timeout=60) is JobState.SUCCEEDED
    finally:
        stop.set()
        thread.join(timeout=5)
        other.close()
    assert SECRET.encode() not in got and b"submit" not in got


def test_terminate_without_an_answer_raises_and_leaves_the_job_running(
    ws: Workspace, running: tuple[Job, int]
) -> None:
    job, pid = running
    sched = scheduler_pid(_state(ws, "c"))
    assert sched is not None
    os.kill(sched, signal.SIGSTOP)  # the scheduler answers nothing
    try:
        t = time.monotonic()
        with pytest.raises((BackendError, BatchAITimeoutError)):  # typed, naming the cluster or its host
            job.terminate(timeout=5)
        assert time.monotonic() - t < 60
        assert pid_alive(pid) and job.state is JobState.RUNNING  # untouched: not recorded terminated
    finally:
        os.kill(sched, signal.SIGCONT)
    assert job.terminate(timeout=60) is JobState.TERMINATED
    wait_for(lambda: not pid_alive(pid), 30, "the rank to end")


def test_terminate_records_terminated_only_once_the_processes_ended(
    ws: Workspace, running: tuple[Job, int]
) -> None:
    job, pid = running
    (_state(ws, "c") / "sched.sock").unlink()  # the 20 s path: ctl found no scheduler answering
    state = job.terminate(timeout=60)
    if state is JobState.TERMINATED:
        wait_for(lambda: not pid_alive(pid), 5, "the rank to have ended")
    assert not pid_alive(pid) or job.state is JobState.RUNNING
