"""Every client call keeps its timeout when the head node, the share's host, stops answering (its link
down: TCP connections stay open and silent, as with a host that lost power): ``job.wait(timeout=T)``
ends within T and a few seconds, ``job.status`` within the workspace's ``io_timeout``, ``terminate``
within its timeout (paramiko's SFTP read once blocked ~16 minutes; then each read up to 30 s, whatever the
caller's timeout). Each either read the share through the next host that answers (the share fails over:
every host sees it), or fails with an error naming the silent host — never later."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nslab import STARTED

from batchai_sdk import JobState, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.exceptions import BatchAIError, BatchAITimeoutError, ShareError
from batchai_sdk.experiment import Experiment
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.nsnodes]

WORKSPACE = "headgone"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp(WORKSPACE)


@pytest.fixture(scope="module")
def lab(ns_nodes: NSNodes, root: Path) -> Iterator[Workspace]:
    """The module's workspace with ``io_timeout`` at its default (30 s), as a user has it."""
    ws = ns_nodes.workspace(WORKSPACE, root, ns_nodes.addresses[:2])
    yield ws
    ws.close()


def test_wait_and_status_keep_their_time_when_the_share_host_goes_silent(
    ns_nodes: NSNodes, root: Path, exp: Experiment, cluster: Cluster, head: NSNode
) -> None:
    job = exp.create_job("sleeps", cluster=cluster, command_line="sleep 600", toolkit="custom").submit()
    STARTED.append(job)
    deadline = time.monotonic() + 90
    while job.state is not JobState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job.state is JobState.RUNNING
    # the same workspace, seen by a client whose share reads wait 3 s at most (connected before the cut)
    quick = ns_nodes.workspace(WORKSPACE, root, ns_nodes.addresses[:2], io_timeout=3.0)
    seen = quick.get_experiment(exp.name).get_job(job.name)
    assert seen.state is JobState.RUNNING
    head.partition()
    try:
        t = time.monotonic()
        with pytest.raises(BatchAITimeoutError) as waited:
            job.wait(timeout=3, poll_interval=0.5)
        took = time.monotonic() - t
        print(f"\nwait(timeout=3), the share's host silent, io_timeout 30: raised after {took:.1f} s")
        assert took < 3 + 4, f"wait(timeout=3) took {took:.1f} s"
        said = str(waited.value)  # the silent host named, or the state read through the next host
        assert f"{head.address}:22" in said or "(state running;" in said, said

        t = time.monotonic()
        try:
            assert seen.status.state is JobState.RUNNING  # read through the next host
        except ShareError as read:
            assert f"{head.address}:22" in str(read), str(read)
        took = time.monotonic() - t
        print(f"job.status, the share's host silent, io_timeout 3: answered after {took:.1f} s")
        assert took < 3 + 4, f"job.status took {took:.1f} s"

        t = time.monotonic()  # following the job's output: the same bound, now on a fresh connection
        with pytest.raises((BatchAITimeoutError, ShareError)) as followed:
            job.wait(timeout=3, poll_interval=0.5, show_output=True, out=io.StringIO())
        took = time.monotonic() - t
        print(f"wait(timeout=3, show_output=True), the share's host silent: raised after {took:.1f} s")
        assert took < 3 + 4, f"wait(timeout=3, show_output=True) took {took:.1f} s"
        if isinstance(
            followed.value, ShareError
        ):  # else the caller's own timeout: read through the next host
            assert head.address in str(followed.value), str(followed.value)

        t = time.monotonic()  # terminate cannot reach the scheduler: it says so in time, the job untouched
        with pytest.raises(BatchAIError) as stopped:
            job.terminate(timeout=3)
        took = time.monotonic() - t
        print(f"terminate(timeout=3), the head node silent: raised after {took:.1f} s")
        assert took < 3 + 4, f"terminate(timeout=3) took {took:.1f} s"
        assert head.address in str(stopped.value), str(stopped.value)
    finally:
        ns_nodes.heal_all()
        quick.close()
