"""A host that loses power (no TCP reset: its packets just vanish) is noticed in seconds on the connections
already open to it, not after ``io_timeout`` (30 s by default, as a user has it): ``job.status`` and a
share read made the moment the head node, the share's host, went off answer through the next host within
a few seconds (remote/liveness.py: a request unanswered for a few seconds has its connection asked for a
keepalive; none comes back), and a command running on it raises ``SSHError`` naming it instead of waiting
out its own timeout. (Before, each waited its 30 s: the better part of the head node's loss in
``bench_goodput``.) A live but slow host is not taken for gone: tests/ssh/test_ssh_slow_host.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from nslab import STARTED

from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.exceptions import BatchAIError, SSHError
from batchai_sdk.experiment import Experiment
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.nsnodes]

WORKSPACE = "deadhost"
NOTICED = 8.0  # seconds: the probe (2.5 s), its answer (3 s), and room for a loaded machine; 30 before


def test_a_powered_off_head_is_noticed_in_seconds_by_status_reads_and_commands(
    ns_nodes: NSNodes, lab: Workspace, exp: Experiment, cluster: Cluster, head: NSNode, tmp_path: Path
) -> None:
    job = exp.create_job("ends", cluster=cluster, command_line="echo hi", toolkit="custom").submit()
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    assert lab.backend.io_timeout == 30  # type: ignore[attr-defined]  # the default a user has
    # another client of the same workspace, with its share connection open on the head node too
    other = ns_nodes.workspace(WORKSPACE, _root(lab), ns_nodes.addresses[:2])
    other.share.write_text("notes/hello.txt", "hello")
    # commands running on the head node over a connection of their own
    (tmp_path / "known_hosts").write_text(head.host_key_line())
    runner = SSHRunner(
        head.address, user=ns_nodes.user, key_file=ns_nodes.key_file,
        host_keys=HostKeyStore(tmp_path / "known_hosts"), connect_timeout=5.0,
    )  # fmt: skip
    assert runner.run("true").ok
    ended: list[float] = []
    raised: list[BaseException] = []

    def command() -> None:
        try:
            runner.run("sleep 60", timeout=90)
        except BatchAIError as exc:
            raised.append(exc)
        ended.append(time.monotonic())

    for _ in range(2):  # two on one connection: one keepalive unanswered ends both
        threading.Thread(target=command, daemon=True).start()
    time.sleep(1.0)  # the commands run
    try:
        off = time.monotonic()
        head.power_off()

        t = time.monotonic()
        assert job.status.state is JobState.SUCCEEDED  # read through the next host
        took = time.monotonic() - t
        print(f"\njob.status, the head node powered off, io_timeout 30: answered after {took:.1f} s")
        assert took < NOTICED, f"job.status took {took:.1f} s"

        t = time.monotonic()
        assert other.share.read_text("notes/hello.txt") == "hello"  # another client: the same
        took = time.monotonic() - t
        print(f"a share read, the head node powered off, io_timeout 30: answered after {took:.1f} s")
        assert took < NOTICED, f"the share read took {took:.1f} s"

        wait_for(lambda: len(ended) == 2, timeout=90, what="the commands on the powered-off node to end")
        took = max(ended) - off
        print(f"two commands on the powered-off node (timeout 90): raised after {took:.1f} s")
        assert len(raised) == 2 and all(isinstance(e, SSHError) for e in raised), raised
        assert all(f"{head.address}:22" in str(e) for e in raised), raised
        assert took < NOTICED, f"the commands on the powered-off node ended after {took:.1f} s"
    finally:
        ns_nodes.heal_all()
        runner.close()
        other.close()


def _root(ws: Workspace) -> Path:
    """The lab's folder (its share is ``root/share``)."""
    return Path(ws.backend.share_path).parent  # type: ignore[attr-defined]


def test_a_running_jobs_status_answers_in_seconds_with_the_head_cut_off(
    ns_nodes: NSNodes, lab: Workspace, exp: Experiment, cluster: Cluster, head: NSNode
) -> None:
    job = exp.create_job("runs", cluster=cluster, command_line="sleep 600", toolkit="custom").submit()
    STARTED.append(job)
    wait_for(lambda: job.state is JobState.RUNNING, timeout=90, what="the job to run")
    # a client that reads the share on the head node (the lab's own moved on in the test above)
    client = ns_nodes.workspace(WORKSPACE, _root(lab), ns_nodes.addresses[:2])
    seen = client.get_experiment(exp.name).get_job(job.name)
    assert seen.state is JobState.RUNNING
    head.link_down()  # a partition: as a power-off seen from the client, the head's processes run on
    try:
        t = time.monotonic()
        assert seen.status.state is JobState.RUNNING  # read through the next host
        took = time.monotonic() - t
        print(f"\njob.status of a running job, the head node cut off, io_timeout 30: {took:.1f} s")
        assert took < NOTICED, f"job.status took {took:.1f} s"
    finally:
        ns_nodes.heal_all()
        client.close()
