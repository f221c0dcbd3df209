"""The tutorial's command sequence with `az batchai` replaced by `batchai` (and `az storage` / `az group` by
`batchai storage` / `batchai group`), end to end on the local backend: real mpirun, Horovod and training."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchai_sdk.cli import main
from batchai_sdk.train import module_path

pytestmark = [pytest.mark.train, pytest.mark.mpi]

TUTORIAL_JOB = Path(__file__).parent / "data" / "tutorial_job.json"
RG = ["--resource-group", "batchai.horovod", "--workspace", "batchaidev"]
STORAGE = ["--account-name", "mystorageaccount"]


def batchai(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{err}"
    return out


def test_tutorial_commands_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = [m for m in ("tensorflow", "horovod", "sklearn") if importlib.util.find_spec(m) is None]
    if absent or shutil.which("mpirun") is None:
        pytest.skip(f"needs the train extra and mpirun (missing: {', '.join(absent) or 'mpirun'})")
    home = tmp_path / "home"
    monkeypatch.setenv("BATCHAI_HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    # Prepare the environment
    batchai(capsys, "group", "create", "--name", "batchai.horovod", "--location", "eastus")
    batchai(capsys, "workspace", "create", *RG)
    batchai(capsys, "experiment", "create", *RG, "--name", "cifar")
    batchai(capsys, "cluster", "create", *RG, "--name", "nc6cluster", "--vm-priority", "dedicated",
            "--vm-size", "Standard_NC6", "--target", "2", "--generate-ssh-keys")  # fmt: skip

    # `cluster show --output table`, once through the installed console script
    console = Path(sys.executable).parent / "batchai"
    proc = subprocess.run(
        [
            str(console),
            "cluster",
            "show",
            "--name",
            "nc6cluster",
            "--workspace",
            "batchaidev",
            "--resource-group",
            "batchai.horovod",
            "--output",
            "table",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    header, _, row = proc.stdout.splitlines()
    assert header.split("  ")[0] == "Name" and [c.strip() for c in header.split("  ") if c.strip()] == [
        "Name", "Resource Group", "Workspace", "VM Size", "State", "Idle", "Running", "Preparing", "Leaving",
        "Unusable",
    ]  # fmt: skip
    assert row.split() == ["nc6cluster", "batchai.horovod", "batchaidev", "STANDARD_NC6", "steady",
                           "2", "0", "0", "0", "0"]  # fmt: skip

    # Storage: account, share, directory, the training script
    batchai(capsys, "storage", "account", "create", "--resource-group", "batchai.horovod",
            "--name", "mystorageaccount", "--location", "eastus", "--sku", "Standard_LRS")  # fmt: skip
    batchai(capsys, "storage", "share", "create", "--name", "myshare", *STORAGE)
    batchai(capsys, "storage", "directory", "create", "--name", "cifar", "--share-name", "myshare", *STORAGE)
    shutil.copy(module_path("cifar10"), work / "cifar_cnn_distributed.py")
    batchai(capsys, "storage", "file", "upload", "--path", "cifar", "--share-name", "myshare",
            "--source", "cifar_cnn_distributed.py", *STORAGE)  # fmt: skip

    # The tutorial's job.json, on 2 nodes, offline and short; job preparation would apt-install here
    job = json.loads(TUTORIAL_JOB.read_text())
    props = job["properties"]
    props["nodeCount"] = 2
    del props["jobPreparation"]
    props["horovodSettings"]["commandLineArgs"] += " --dataset digits --epochs 2 --seed 1"
    (work / "job.json").write_text(json.dumps(job, indent=4))
    started = time.monotonic()
    batchai(capsys, "job", "create", "--cluster", "nc6cluster", "--name", "cifar_distributed",
            "--resource-group", "batchai.horovod", "--workspace", "batchaidev", "--experiment", "cifar",
            "--config-file", "job.json", "--storage-account-name", "mystorageaccount")  # fmt: skip

    show = ["job", "show", "--experiment", "cifar", "--name", "cifar_distributed", *RG]
    assert json.loads(batchai(capsys, *show, "--query", "executionState")) in (
        "queued",
        "running",
        "succeeded",
    )

    # While it trains, both nodes are taken
    counts: dict[str, int] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        counts = json.loads(batchai(capsys, "cluster", "show", "--name", "nc6cluster", *RG,
                                    "--query", "nodeStateCounts"))  # fmt: skip
        if counts["runningNodeCount"] == 2:
            break
        time.sleep(0.5)
    assert counts == {
        "idleNodeCount": 0,
        "leavingNodeCount": 0,
        "preparingNodeCount": 0,
        "runningNodeCount": 2,
        "unusableNodeCount": 0,
    }

    files = batchai(capsys, "job", "file", "list", "--experiment", "cifar", "--job", "cifar_distributed",
                    *RG, "--output", "table").splitlines()  # fmt: skip
    assert files[0].split() == ["Name", "Type", "Size", "Modified"]
    names = {line.split()[0] for line in files[2:]}
    assert {"stdout.txt", "stderr.txt"} <= names
    assert any(n.startswith("execution-") and n.endswith(".log") for n in names)

    # stream follows stdout.txt until the job ends
    stream = batchai(capsys, "job", "file", "stream", "--experiment", "cifar", "--file-name", "stdout.txt",
                     "--job", "cifar_distributed", *RG)  # fmt: skip
    assert "Epoch 2/2" in stream
    assert "Saved trained model" in stream
    assert json.loads(batchai(capsys, *show, "--query", "executionState")) == "succeeded"
    waited = batchai(capsys, "job", "wait", "--experiment", "cifar", "--name", "cifar_distributed", *RG,
                     "--query", "[executionState, exitCode]", "-o", "tsv")  # fmt: skip
    assert waited.split() == ["succeeded", "0"]
    print(f"tutorial job: {time.monotonic() - started:.1f}s from create to end", file=sys.stderr)

    # The model, downloaded into the working directory
    batchai(capsys, "storage", "file", "download", "--path", "cifar/saved_models/keras_cifar10_trained_model.h5",
            "--share-name", "myshare", *STORAGE)  # fmt: skip
    model = work / "keras_cifar10_trained_model.h5"
    assert model.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"

    # Clean-up
    resized = batchai(capsys, "cluster", "resize", "--name", "nc6cluster", "--resource-group", "batchai.horovod",
                      "--target", "0", "--workspace", "batchaidev", "--output", "table")  # fmt: skip
    assert resized.splitlines()[2].split()[4:] == ["steady", "0", "0", "0", "0", "0"]
    batchai(capsys, "group", "delete", "--name", "batchai.horovod", "--yes")
    assert not (home / "groups" / "batchai.horovod").exists()
    assert batchai(capsys, "group", "exists", "--name", "batchai.horovod") == "false\n"
