"""The health gate on real sshd nodes: a node made slow for real (its sshd, and so everything a session
starts there, held to a fifth of a core by a cgroup) fails the all-reduce check with its bandwidth, is
marked unusable with that reason, and gets no job while the healthy node does."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import JobState, UnhealthyNodesError

pytestmark = pytest.mark.ssh
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller, as on this machine
SLOW = "127.0.0.9"


@contextlib.contextmanager
def cpu_limited(pid: int, share: float) -> Iterator[None]:
    """Hold ``pid`` and everything it starts from now on to ``share`` of one core."""
    group = CPU_CGROUP / f"batchai-test-slow-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))
        (group / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        pytest.skip(f"cannot limit a node's CPU with a cgroup here: {exc}")
    try:
        yield
    finally:
        for left in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (CPU_CGROUP / "cgroup.procs").write_text(left)
        with contextlib.suppress(OSError):
            group.rmdir()


def test_a_slow_node_is_kept_out_with_its_bandwidth(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if not os.access(CPU_CGROUP, os.W_OK):
        pytest.skip("no writable cgroup v1 cpu controller")
    node = ssh_nodes.add(SLOW)
    try:
        assert node.process is not None
        with cpu_limited(node.process.pid, 0.1):
            ws = ssh_nodes.workspace("health", tmp_path, [NODE_ADDRESSES[0], SLOW])
            cluster = ws.create_cluster("c", nodes=2)
            ids = {n.address: n.id for n in ws.backend.cluster_status(cluster.spec).nodes}
            report = cluster.check_nodes("full")
            assert set(report.unusable) == {ids[SLOW]}, str(report)
            assert " allreduce busbw=" in report.unusable[ids[SLOW]]
            assert "< 30% of the others'" in report.unusable[ids[SLOW]]
            assert report.healthy == (ids[NODE_ADDRESSES[0]],)
            assert cluster.node_counts.unusable == 1
            exp = ws.create_experiment("e")
            with pytest.raises(UnhealthyNodesError, match="allreduce busbw="):
                exp.create_job(
                    "two", cluster=cluster, node_count=2, command_line="true", toolkit="custom"
                ).submit()
            job = exp.create_job(
                "one", cluster=cluster, command_line="echo $BATCHAI_JOB_NODES", toolkit="custom"
            )
            job.submit()
            assert job.wait(timeout=120) is JobState.SUCCEEDED
            assert job.tail("stdout.txt") == [ids[NODE_ADDRESSES[0]]]  # the healthy node took it
            ws.close()
    finally:
        ssh_nodes.remove(SLOW)
