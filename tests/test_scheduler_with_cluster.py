"""A local cluster's scheduler starts with the cluster (create, resize up), as a Batch AI cluster's head
was up before its first job: one process per cluster however many clients ask, a submit still starts it
after a kill -9, and it does not outlive the cluster's deletion."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from _procs import pid_alive, wait_for
from _scheduler_procs import cmdline, scheduler_pid
from batchai_sdk import JobState, Workspace


def schedulers(state: Path) -> list[int]:
    """Every process running the scheduler of the folder ``state``."""
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and cmdline(int(e))[3:5] == [b"scheduler", bytes(state)]
    ]


def test_create_cluster_starts_one_scheduler_a_submit_restarts_it_and_delete_ends_it(ws: Workspace) -> None:
    state = Path(ws.backend.temp_root) / "scheduler" / "c"  # type: ignore[attr-defined]
    cluster = ws.create_cluster("c", nodes=2)
    first = scheduler_pid(state)
    assert first is not None, "no scheduler after create_cluster"
    # four clients asking at once reach that one scheduler on its socket; none starts a second
    calls = [threading.Thread(target=ws.backend.scheduler(cluster.spec).ensure_running) for _ in range(4)]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    assert schedulers(state) == [first]

    os.kill(first, signal.SIGKILL)  # its socket file stays behind, answering nobody
    wait_for(lambda: not pid_alive(first), 10, "the scheduler to die")
    exp = ws.create_experiment("e")
    job = exp.create_job("j", cluster=cluster, command_line="true").submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert len(schedulers(state)) <= 1

    ws.delete_cluster("c")
    wait_for(lambda: not schedulers(state), 30, "the deleted cluster's scheduler to exit")


def test_resize_up_starts_the_scheduler_and_an_empty_or_autoscale_cluster_starts_none(ws: Workspace) -> None:
    root = Path(ws.backend.temp_root) / "scheduler"  # type: ignore[attr-defined]
    empty = ws.create_cluster("empty", nodes=0)
    auto = ws.create_cluster("auto", min_nodes=0, max_nodes=2)  # its scheduler sizes it: started by a job
    assert scheduler_pid(root / "empty") is None
    assert scheduler_pid(root / "auto") is None
    empty.resize(1)
    assert scheduler_pid(root / "empty") is not None, "no scheduler after resize(1)"
    ws.delete_cluster("empty")
    ws.delete_cluster(auto.name)
    wait_for(lambda: not schedulers(root / "empty"), 30, "the deleted cluster's scheduler to exit")
