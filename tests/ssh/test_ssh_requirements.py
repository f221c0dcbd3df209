"""source_dir's requirements.txt on SSH nodes: each node's job preparation installs it into the job's venv
(two nodes on one machine here: they build the venv once, under its lock). Offline: a wheel shipped with
the project (tests/wheels.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import JobState
from wheels import tiny_project

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

RANKS = """\
import os, sys
import tinypkg
print("rank", os.environ.get("OMPI_COMM_WORLD_RANK"), "tinypkg", tinypkg.VALUE, "prefix", sys.prefix, flush=True)
"""


def test_requirements_are_installed_on_every_node_of_a_two_node_job(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    ws = ssh_nodes.workspace("req", tmp_path / "lab", NODE_ADDRESSES[:2])
    try:
        proj = tiny_project(tmp_path / "proj")
        (proj / "ranks.py").write_text(RANKS)
        cluster = ws.create_cluster("c", nodes=2)
        job = ws.create_experiment("e").create_job(
            "two", cluster=cluster, node_count=2, source_dir=proj, python_script="ranks.py"
        )
        assert job.submit().wait(timeout=240) is JobState.SUCCEEDED, job.status.failure_reason
        lines = sorted(job.tail(lines=10))
        assert [line.split()[:4] for line in lines] == [
            ["rank", "0", "tinypkg", "42"],
            ["rank", "1", "tinypkg", "42"],
        ]
        assert all("/venvs/" in line.split()[5] for line in lines)
    finally:
        ws.close()
