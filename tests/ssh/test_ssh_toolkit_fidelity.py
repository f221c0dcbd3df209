"""The custom-toolkit job of test_toolkit_fidelity_local on two sshd nodes: its own mpirun, on the hostfile
Batch AI gave it, reaches both machines; its command lines run under bash."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import Job
from test_toolkit_fidelity_local import CUSTOM_JOB, custom_job_ranks

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]


def test_a_custom_job_s_own_mpirun_runs_on_both_sshd_nodes(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    ws = ssh_nodes.workspace("fidelity", tmp_path, NODE_ADDRESSES[:2], env={"PATH": path})
    try:
        cluster = ws.create_cluster("c", nodes=2)
        exp = ws.create_experiment("e")
        job = Job.from_batchai_json(CUSTOM_JOB, experiment=exp, cluster=cluster, name="own-mpirun")
        job.submit()
        assert custom_job_ranks(job) == ["rank 0 of 2", "rank 1 of 2"]
        hostfile = [line.split()[0] for line in Path(job_hostfile(ws, job)).read_text().splitlines()]
        assert hostfile == list(NODE_ADDRESSES[:2])  # every node of the job, one line each
        assert len([f for f in job.files() if f.name.startswith("stdout-job_prep-")]) == 2
    finally:
        ws.close()


def job_hostfile(ws: object, job: Job) -> str:
    return str(Path(ws.share.root) / job.paths.run_dir / "hostfile")  # type: ignore[attr-defined]
