"""Real deadlocks, one rank skipping a collective the others wait in, on 2 local nodes: PyTorch over gloo
with 2 ranks (rank 1 enters a barrier where rank 0 enters the all-reduce; the stacks alone cannot tell which
of two ranks strayed, the flight recorder can: every rank ran all-reduces before) and Horovod (rank 1
broadcasts where the others all-reduce; Horovod's stall warnings, every few seconds, are evidence of the hang,
not progress). The verdict names rank 1 and its node."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import Job, Workspace
from hang_jobs import (
    ALLREDUCE_LINE,
    BARRIER_LINE,
    BROADCAST_LINE,
    HOROVOD,
    NOTICE,
    REDUCE_LINE,
    notice_within,
    start,
    write_train,
)

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
Script = Callable[[str, str], Path]


def test_two_gloo_ranks_in_different_collectives_the_flight_recorder_names_the_one_that_strayed(
    ws: Workspace, tmp_path: Path, cleanup: list[Job]
) -> None:
    pytest.importorskip("torch")
    job = start(ws, write_train(tmp_path / "scripts"), "skip", ranks=2)
    cleanup.append(job)
    notice, took = notice_within(job, NOTICE)
    vm0, vm1 = job.status.nodes
    blamed = f"stuck at step 5: rank 1 on {vm1} waits in barrier at train.py:{BARRIER_LINE}; "
    assert blamed + f"rank 0 on {vm0} waits in all_reduce at train.py:{REDUCE_LINE}; " in notice, notice
    assert "flight recorder: rank 0 at collective #" in notice and " barrier" in notice, notice
    assert took < NOTICE + 30, took


def test_a_horovod_deadlock_is_caught_through_its_stall_warnings_and_names_the_rank(
    ws: Workspace, script: Script, cleanup: list[Job]
) -> None:
    pytest.importorskip("horovod.tensorflow")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job("hvd", cluster=cluster, node_count=2, process_count=3, toolkit="horovod",
                         python_script=str(script("train.py", HOROVOD)), hang_notice=NOTICE,
                         environment={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}).submit()  # fmt: skip
    cleanup.append(job)
    notice, _ = notice_within(job, NOTICE)
    warned = [line for line in job.tail("stderr.txt", 300) if "One or more tensors were submitted" in line]
    assert warned, (notice, job.tail("stderr.txt", 40))  # every 2 s, not taken for progress
    assert notice.startswith("possibly hung — stuck at step 5: rank 1 on vm_"), notice
    assert f"waits in broadcast at train.py:{BROADCAST_LINE}; " in notice, notice
    assert f"ranks 0, 2 wait in allreduce at train.py:{ALLREDUCE_LINE}" in notice, notice
    assert "; Horovod: " in notice and "waits for rank 1" in notice, notice
    time.sleep(6)  # three more stall warnings: evidence of the hang, not progress
    assert job.status.notice == notice
