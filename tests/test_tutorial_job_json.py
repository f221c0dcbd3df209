"""The tutorial's job.json, byte for byte from the seed, runs on the local backend (4 nodes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from _stand_ins import TUTORIAL_SCRIPT, engine_calls, stand_in_engine, stand_in_tools
from batchai_sdk import Job, JobState, Workspace

pytestmark = [pytest.mark.mpi, pytest.mark.train]
TUTORIAL_JOB = Path(__file__).parent / "data" / "tutorial_job.json"


def test_the_tutorial_job_json_runs_unchanged_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("horovod.tensorflow")
    log = tmp_path / "tools.log"
    venv_bin = str(Path(sys.executable).parent)
    engine_log = tmp_path / "engine.log"  # a stand-in podman: the same with or without a real engine here
    stand_in_engine(tmp_path / "bin", engine_log, engine="podman")
    monkeypatch.setenv("PATH", f"{stand_in_tools(tmp_path / 'bin', log)}:{venv_bin}:{os.environ['PATH']}")
    ws = Workspace.local(root=tmp_path / "ws", allow_host_changes=True)  # its jobPreparation installs
    exp = ws.create_experiment("cifar")
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=4)
    ws.share.mkdir("cifar")
    (tmp_path / "cifar_cnn_distributed.py").write_text(TUTORIAL_SCRIPT)
    ws.share.upload(tmp_path / "cifar_cnn_distributed.py", "cifar/cifar_cnn_distributed.py")

    job = Job.from_batchai_json(
        TUTORIAL_JOB,
        experiment=exp,
        cluster=cluster,
        name="cifar_distributed",
        storage_account="mystorageaccount",
    )
    assert job.spec.node_count == 4 and job.spec.mount_path == "myshare"
    job.submit()
    assert job.wait(timeout=300) is JobState.SUCCEEDED, job.status.failure_reason
    lines = sorted(line for line in job.stream("stdout.txt", follow=False) if line.startswith("rank"))
    assert lines == [f"rank {r} of 4: 4 ranks answered" for r in range(4)]
    # stdOutErrPathPrefix: the logs are under the share's cifar folder, as Batch AI nested them
    assert ws.share.exists("cifar/experiments/cifar/jobs/cifar_distributed/stdouterr/stdout.txt")
    # jobPreparation ran once: the 4 local nodes are one machine
    assert log.read_text().splitlines() == [
        "apt update",
        "apt install mpi-default-dev mpi-default-bin -y",
        "pip install keras horovod",
    ]
    # containerSettings: the image pulled once (one machine) by its full name, then each rank run in it
    image = "docker.io/tensorflow/tensorflow:1.8.0-gpu"
    assert engine_calls(engine_log, "pull") == [["podman", "pull", image]]
    runs = engine_calls(engine_log, "run")
    assert len(runs) == 4 and all(image in run for run in runs)
    # the model, where the tutorial downloads it from
    model = ws.share.download("cifar/saved_models/keras_cifar10_trained_model.h5", tmp_path / "model.h5")
    assert model.read_bytes()[:4] == b"\x89HDF"
