"""Hang verdicts over real sshd nodes: the stacks are collected on each node over SSH, and the verdict names
the rank and node that differ (a rank sleeping in the loop; a rank stopped by SIGSTOP, failed by
hang_timeout with the verdict as its reason; every process of the job on the second node stopped), and a
healthy job with uneven steps gets no notice."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES

from _labs import ssh_lab
from _procs import wait_for
from batchai_sdk import JobState, Workspace
from hang_jobs import (
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
pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.slow]
GLOO = {"GLOO_SOCKET_IFNAME": "lo"}


lab = ssh_lab(NODE_ADDRESSES[:2], "hangs")


def test_a_sleeping_rank_on_the_second_ssh_node_is_named(lab: Workspace, tmp_path: Path) -> None:
    job = start(lab, write_train(tmp_path), "sleep", environment=GLOO)
    try:
        notice, _ = notice_within(job, NOTICE)
        nodes = job.status.nodes
        assert f"rank 1 on {nodes[1]} is in train.py:{SLEEP_LINE} (time.sleep(3600))" in notice, notice
        assert f"rank 0 on {nodes[0]} waits in all_reduce at train.py:{REDUCE_LINE}" in notice, notice
        wait_for(lambda: any(line.startswith("[batchai] possibly hung") for line in job.tail("stdout.txt", 30)),
                 30, "the verdict in the stream")  # fmt: skip
    finally:
        job.terminate()


def test_a_stopped_rank_on_an_ssh_node_fails_the_job_with_the_verdict(lab: Workspace, tmp_path: Path) -> None:
    job = start(lab, write_train(tmp_path), "run", environment=GLOO, hang_timeout=NOTICE + 10)
    wait_for(lambda: step_of(job) >= 3, 180, "three steps")
    pid = rank_pids(job, 1)["pid"]
    os.kill(pid, signal.SIGSTOP)  # the sshd nodes are loopback addresses of this machine
    try:
        assert job.wait(timeout=240) is JobState.FAILED
        reason = job.status.failure_reason or ""
        assert f"rank 1 on {job.status.nodes[1]} is stopped (SIGSTOP or a debugger)" in reason, reason
        assert "(possible hang); stacks in stacks-" in reason, reason
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        if not job.state.ended:
            job.terminate()


def test_a_whole_stopped_ssh_node_is_named(lab: Workspace, tmp_path: Path) -> None:
    job = start(lab, write_train(tmp_path), "run", name="stopped-node", environment=GLOO)
    wait_for(lambda: step_of(job) >= 3, 180, "three steps")
    try:
        with second_node_stopped(job):
            notice, _ = notice_within(job, NOTICE)
            assert f"rank 1 on {job.status.nodes[1]} is stopped" in notice, notice
            assert f"rank 0 on {job.status.nodes[0]} waits in all_reduce" in notice, notice
    finally:
        job.terminate()


def test_a_healthy_job_with_uneven_steps_on_ssh_nodes_gets_no_notice(lab: Workspace, tmp_path: Path) -> None:
    job = start(lab, write_train(tmp_path), "run", name="healthy", steps=24, environment=GLOO)
    seen = notices_until_it_ends(job)
    assert job.status.state is JobState.SUCCEEDED, job.status.failure_reason
    assert seen == [] and not any(line.startswith("[batchai] ") for line in job.tail("stdout.txt", 500))
