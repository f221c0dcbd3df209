"""A cluster.json on two sshd nodes: its setup task runs on each node under bash with its variables, as Batch
AI ran it, and flags given with the call override the file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import Job, JobState

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

CLUSTER = {
    "properties": {
        "vmSize": "STANDARD_NC6",
        "scaleSettings": {"manual": {"targetNodeCount": 4}},
        "nodeSetup": {
            "setupTask": {
                "commandLine": 'source /etc/os-release && [[ -n "$ID" ]] && echo "set up: $GREETING on $ID"',
                "environmentVariables": [{"name": "GREETING", "value": "it's Batch AI's"}],
                "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/afs",
            }
        },
    }
}


def test_the_setup_task_runs_on_every_node_under_bash(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    ws = ssh_nodes.workspace("clusterjson", tmp_path, NODE_ADDRESSES[:2], env={"PATH": path})
    try:
        notes: list[str] = []
        cluster = ws.create_cluster_from_batchai_json("c", CLUSTER, nodes=2, on_note=notes.append)
        assert cluster.spec.nodes == 2 and cluster.spec.vm_size == "STANDARD_NC6"  # the call wins
        assert any("setup logs" in n for n in notes)
        exp = ws.create_experiment("e")
        doc = {"properties": {"nodeCount": 2, "customToolkitSettings": {"commandLine": "true"}}}
        job = Job.from_batchai_json(doc, experiment=exp, cluster=cluster, name="after-setup")
        job.submit()  # the nodes are set up before the job's first run
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
        setup = Path(ws.share.root) / ".batchai" / "clusters" / "c" / "setup"  # type: ignore[attr-defined]
        for address in NODE_ADDRESSES[:2]:
            out = (setup / f"stdout-setup-{address}.txt").read_text()
            assert "set up: it's Batch AI's on " in out, out
    finally:
        ws.close()
