"""The tutorial's job.json, byte for byte from the seed, runs on the SSH backend across 4 sshd nodes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _stand_ins import TUTORIAL_SCRIPT, engine_calls, stand_in_engine, stand_in_tools
from batchai_sdk import Job, JobState

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.train]
TUTORIAL_JOB = Path(__file__).parent.parent / "data" / "tutorial_job.json"


def test_the_tutorial_job_json_runs_unchanged_over_ssh(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    pytest.importorskip("horovod.tensorflow")
    log = tmp_path / "tools.log"
    engine_log = tmp_path / "engine.log"  # a stand-in podman: the same with or without a real engine here
    stand_in_engine(tmp_path / "bin", engine_log, engine="podman")
    path = f"{stand_in_tools(tmp_path / 'bin', log)}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    share = tmp_path / "mnt" / "share"
    ws = ssh_nodes.workspace("lab", tmp_path, NODE_ADDRESSES, env={"PATH": path})
    try:
        exp = ws.create_experiment("cifar")
        cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=4)
        (tmp_path / "cifar_cnn_distributed.py").write_text(TUTORIAL_SCRIPT)
        ws.share.upload(tmp_path / "cifar_cnn_distributed.py", "cifar/cifar_cnn_distributed.py")
        job = Job.from_batchai_json(
            TUTORIAL_JOB,
            experiment=exp,
            cluster=cluster,
            name="cifar_distributed",
            storage_account="mystorageaccount",
        )
        job.submit()
        assert job.wait(timeout=300) is JobState.SUCCEEDED, job.status.failure_reason
        lines = sorted(line for line in job.stream("stdout.txt", follow=False) if line.startswith("rank"))
        assert lines == [f"rank {r} of 4: 4 ranks answered" for r in range(4)]
        assert (share / "cifar/experiments/cifar/jobs/cifar_distributed/stdouterr/stdout.txt").is_file()
        # jobPreparation ran once on each of the 4 nodes (each sshd address is a machine of its own)
        calls = log.read_text().splitlines()
        assert sorted(set(calls)) == [
            "apt install mpi-default-dev mpi-default-bin -y",
            "apt update",
            "pip install keras horovod",
        ]
        assert len(calls) == 12
        prep_logs = [f.name for f in job.files() if f.name.startswith("stdout-job_prep-")]
        assert len(prep_logs) == 4
        # containerSettings: the image pulled once on each of the 4 machines by its full name, before the
        # 4 ranks ran in it
        image = "docker.io/tensorflow/tensorflow:1.8.0-gpu"
        assert engine_calls(engine_log, "pull") == [["podman", "pull", image]] * 4
        seen = engine_calls(engine_log)
        assert {c[1] for c in seen[:4]} == {"pull"} and len(seen) == 8
        assert all(image in run for run in seen[4:])
        model = ws.share.download("cifar/saved_models/keras_cifar10_trained_model.h5", tmp_path / "model.h5")
        assert model.read_bytes()[:4] == b"\x89HDF"
    finally:
        ws.close()
