"""Hang verdicts with real ranks (PyTorch over gloo through the cluster scheduler, local nodes): a job that
reports steps is stuck once no new step comes for max(3 × its median step interval, the floor), however much
it still prints; the notice names the rank and node that differ from the others (stacks per rank, user frames
first) and shows in the status, the stream, the views and the failure reason. A healthy job with uneven steps
gets no notice."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import Job, JobState, Workspace
from hang_jobs import (
    BARRIER_LINE,
    NOTICE,
    REDUCE_LINE,
    SLEEP_LINE,
    notice_within,
    notices_until_it_ends,
    rank_pids,
    second_node_stopped,
    start,
    step_of,
    write_train,
)

pytest.importorskip("torch")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]
Script = Callable[[str, str], Path]


@pytest.fixture
def train(tmp_path: Path) -> Path:
    return write_train(tmp_path / "scripts")


def seen_everywhere(job: Job, notice: str, blame: str) -> None:
    """The verdict is in the status, to_dict, the notebook view, the job's stream."""
    assert job.status.state is JobState.RUNNING and blame in notice, notice
    assert job.to_dict()["notice"] == notice and blame in job._repr_html_()
    wait_for(lambda: any(blame in line for line in job.tail("stdout.txt", 30)), 30, "the verdict in stdout")
    ours = [line for line in job.tail("stdout.txt", 200) if line.startswith("[batchai] ")]
    assert ours == [f"[batchai] {notice}"], ours  # once, as it happened
    streamed = next(line for line in job.stream(timeout=60) if line.startswith("[batchai] "))
    assert blame in streamed, streamed


def test_a_rank_sleeping_in_the_loop_is_named_while_the_others_wait_in_the_all_reduce(
    ws: Workspace, train: Path, cleanup: list[Job]
) -> None:
    job = start(ws, train, "sleep")
    cleanup.append(job)
    notice, took = notice_within(job, NOTICE)
    vm1 = job.status.nodes[1]
    assert notice.startswith("possibly hung — stuck at step 5: "), notice
    assert f"rank 1 on {vm1} is in train.py:{SLEEP_LINE} (time.sleep(3600))" in notice, notice
    assert f"rank 0 on {job.status.nodes[0]} waits in all_reduce at train.py:{REDUCE_LINE}" in notice, notice
    assert "no new step for" in notice and took < NOTICE + 30, (took, notice)
    seen_everywhere(job, notice, f"rank 1 on {vm1} is in train.py:{SLEEP_LINE}")
    stacks = job.tail(f"stacks-{vm1}.txt", 60)
    assert any(f"=== rank 1 on {vm1}" in line for line in stacks), stacks
    assert not any("=== rank 0" in line for line in stacks), stacks  # rank 0 is in the other node's file


def test_a_stopped_rank_is_named_and_hang_timeout_fails_the_job_with_the_verdict(
    ws: Workspace, train: Path, cleanup: list[Job]
) -> None:
    job = start(ws, train, "run", hang_timeout=NOTICE + 10)
    cleanup.append(job)
    wait_for(lambda: step_of(job) >= 3, 180, "three steps")
    pid = rank_pids(job, 1)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        notice, _ = notice_within(job, NOTICE)
        vm1 = job.status.nodes[1]
        assert f"rank 1 on {vm1} is stopped (SIGSTOP or a debugger)" in notice, notice
        assert job.wait(timeout=120) is JobState.FAILED
        reason = job.status.failure_reason or ""
        assert reason.startswith("stuck at step ") and f"rank 1 on {vm1} is stopped" in reason, reason
        assert "no new step for " in reason and "(possible hang); stacks in stacks-" in reason, reason
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_a_whole_stopped_node_is_named(ws: Workspace, train: Path, cleanup: list[Job]) -> None:
    job = start(ws, train, "run")
    cleanup.append(job)
    wait_for(lambda: step_of(job) >= 3, 180, "three steps")
    with second_node_stopped(job):
        notice, _ = notice_within(job, NOTICE)
        assert f"rank 1 on {job.status.nodes[1]} is stopped" in notice, notice
        assert f"rank 0 on {job.status.nodes[0]} waits in all_reduce" in notice, notice


def test_a_collective_skipped_by_one_rank_names_it_and_its_timeout_blames_it_not_the_waiters(
    ws: Workspace, train: Path, cleanup: list[Job]
) -> None:
    job = start(ws, train, "skip", ranks=3)
    cleanup.append(job)
    notice, _ = notice_within(job, NOTICE)
    nodes = job.status.nodes
    assert f"rank 1 on {nodes[0]} waits in barrier at train.py:{BARRIER_LINE}" in notice, notice
    assert f"ranks 0, 2 wait in all_reduce at train.py:{REDUCE_LINE}" in notice, notice


def test_a_collective_timeout_is_reported_naming_the_rank_the_stacks_blame_not_the_waiter(
    ws: Workspace, train: Path, cleanup: list[Job]
) -> None:
    job = start(ws, train, "sleep", gloo_timeout=45)  # rank 0's all-reduce gives up after 45 s
    cleanup.append(job)
    notice_within(job, NOTICE)
    assert job.wait(timeout=180) is JobState.FAILED
    reason = job.status.failure_reason or ""
    vm1 = job.status.nodes[1]
    assert reason.startswith(f"stuck at step 5: rank 1 on {vm1} is in train.py:{SLEEP_LINE}"), reason
    assert " — then the job failed: " in reason, reason


def test_a_healthy_job_with_uneven_steps_gets_no_notice(
    ws: Workspace, train: Path, cleanup: list[Job]
) -> None:
    job = start(ws, train, "run", steps=24)
    cleanup.append(job)
    seen = notices_until_it_ends(job)
    assert job.status.state is JobState.SUCCEEDED, job.status.failure_reason
    assert seen == [] and not any(line.startswith("[batchai] ") for line in job.tail("stdout.txt", 500))


HOROVOD = """\
import os, time
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
import tensorflow as tf
import horovod.tensorflow as hvd
hvd.init()
for step in range(1, 10000):
    if rank == 1 and step == 4:
        time.sleep(3600)
    hvd.allreduce(tf.constant([1.0]), name="grad")
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.3)
"""
SLEEPS_AT, GRAD_LINE = 8, 9


def test_a_horovod_hang_is_caught_through_its_stall_warnings_and_the_odd_rank_named(
    ws: Workspace, script: Script, cleanup: list[Job]
) -> None:
    pytest.importorskip("horovod.tensorflow")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job("hvd", cluster=cluster, node_count=2, process_count=2,
                         python_script=str(script("train.py", HOROVOD)), hang_notice=40,
                         environment={"HOROVOD_STALL_CHECK_TIME_SECONDS": "5"}).submit()  # fmt: skip
    cleanup.append(job)
    wait_for(lambda: job.status.notice is not None or job.state.ended, 300, "the hang notice")
    notice = job.status.notice or ""
    warned = [line for line in job.tail("stderr.txt", 200) if "One or more tensors were submitted" in line]
    assert warned, "Horovod's stall warning (written every 5 s, and no longer taken for progress)"
    nodes = job.status.nodes
    assert f"rank 1 on {nodes[1]} is in train.py:{SLEEPS_AT} (time.sleep(3600))" in notice, notice
    assert f"rank 0 on {nodes[0]} waits in allreduce at train.py:{GRAD_LINE}" in notice, notice
