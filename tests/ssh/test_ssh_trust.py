"""Trust boundaries on real sshd nodes: a job on a node writes a forged health report (failures, a FIFO,
8 MB) into the cluster's ``health/`` folder on the share; the head node's scheduler ignores all of it, and
a job that needs both nodes runs at once. The admin's report, handed through the scheduler, is applied."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import JobState
from batchai_sdk import _layout as layout
from health_jobs import FORGER  # the same forger as on local nodes

pytestmark = pytest.mark.ssh


def test_a_report_a_job_on_an_ssh_node_forges_changes_nothing(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    ws = ssh_nodes.workspace("trust", tmp_path, NODE_ADDRESSES[:2])
    try:
        cluster = ws.create_cluster("c", nodes=2)
        nodes = sorted(n.id for n in ws.backend.cluster_status(cluster.spec).nodes)
        forger = tmp_path / "forge.py"
        forger.write_text(FORGER)
        folder = tmp_path / "mnt" / "share" / layout.SHARE.cluster_dir("c") / "health"
        exp = ws.create_experiment("e")
        job = exp.create_job("forge", cluster=cluster, toolkit="custom",
                             command_line=f"{sys.executable} {forger} {folder} {','.join(nodes)}")  # fmt: skip
        job.submit()
        assert job.wait(timeout=120) is JobState.SUCCEEDED
        t = time.monotonic()
        both = exp.create_job("both", cluster=cluster, node_count=2, command_line="true", toolkit="custom")
        both.submit()  # not UnhealthyNodesError: nothing forged is believed, the FIFO blocks nothing
        assert time.monotonic() - t < 20
        assert both.wait(timeout=120) is JobState.SUCCEEDED
        assert cluster.unusable_nodes() == {}
        # the admin's own verdict, through the scheduler, is applied
        cluster.apply_health_report(
            {"level": "basic", "nodes": nodes, "unusable": {nodes[1]: "nhc: ib0 down"}}
        )
        assert cluster.unusable_nodes() == {nodes[1]: "nhc: ib0 down"}
    finally:
        ws.close()
