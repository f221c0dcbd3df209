"""containerSettings over ssh: each node (a machine of its own) pulls the image once, and a failed pull
reaches the job's failure reason from the node's own process. A stand-in engine is first on the nodes'
PATH, so a real docker or podman is never reached."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _stand_ins import engine_calls, stand_in_engine
from batchai_sdk import JobState

pytestmark = [pytest.mark.ssh]


def test_a_failed_pull_on_every_node_fails_the_job_with_the_engines_message(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    log = tmp_path / "engine.log"
    engine = stand_in_engine(tmp_path / "bin", log, engine="docker", pull_error="toomanyrequests: rate limit")
    path = f"{engine}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    ws = ssh_nodes.workspace("lab", tmp_path, NODE_ADDRESSES[:2], env={"PATH": path})
    try:
        exp = ws.create_experiment("e")
        cluster = ws.create_cluster("c", vm_size="Standard_D2_v2", nodes=2)
        (tmp_path / "t.py").write_text("print('the rank ran')\n")
        job = exp.create_job(
            "pull",
            cluster=cluster,
            node_count=2,
            python_script=str(tmp_path / "t.py"),
            container_image="ubuntu",
        )
        job.submit()
        assert job.wait(timeout=180) is JobState.FAILED
        assert job.status.failure_reason == (
            "could not pull image docker.io/library/ubuntu: Error: initializing source "
            "docker://docker.io/library/ubuntu: toomanyrequests: rate limit (engine: docker)"
        )
        # one pull on each of the 2 machines, no rank started
        assert engine_calls(log) == [["docker", "pull", "docker.io/library/ubuntu"]] * 2
    finally:
        ws.close()
