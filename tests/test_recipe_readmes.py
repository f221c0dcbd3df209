"""Microsoft's recipes as their READMEs say (microsoftarchive/BatchAI ``recipes/*/cli-instructions.md``): each
CLI step verbatim, with ``batchai`` for ``az batchai`` and ``az storage``/``az group``, on the local backend.
Two recipes (PyTorch-GPU-Distributed-Gloo, TensorFlow-GPU) with their steps written out and what each
streams checked; every recipe's steps from tests/data/recipe_readmes (the README lines, in order, as
extracted from microsoftarchive/BatchAI at 2238607d5a028a0c5e037168aefca7d7bb165d5c).

The scripts are stand-ins uploaded by the README's own ``storage file upload`` commands (the real ones
download MNIST: there is no network here); nothing is written into a storage folder behind the CLI's back.
The job files are the recipes' own (tests/data/batchai_recipes, the README's ``wget -O job.json`` step).
Steps that cannot run here are named where they would run:

- ``wget`` (the script and job.json): no network; the stand-in script is written to the working directory,
  the job.json is the recipe's copy.
- ``containerSettings`` (``pytorch/pytorch:0.4_cuda9_cudnn7``, ``tensorflow/tensorflow:1.8.0-gpu``): the
  image's own files and its GPU driver cannot run here; the local backend runs the job on this machine
  without it and says so in a note, which the test checks.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi

RECIPES = Path(__file__).parent / "data" / "batchai_recipes"
ACCOUNT = "recipestorage"


def az(line: str, *, status: int = 0) -> tuple[str, str]:
    """One README line, verbatim: ``az batchai X`` runs as ``batchai X``, ``az storage``/``az group`` as
    ``batchai storage``/``batchai group``; ``<storage account name>`` is the test's account."""
    argv = shlex.split(line.replace("<storage account name>", ACCOUNT))
    assert argv[0] == "az", line
    argv = argv[2:] if argv[1] == "batchai" else argv[1:]
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    assert code == status, f"{line}\n-> {code}\n{out.getvalue()}\n{err.getvalue()}"
    return out.getvalue(), err.getvalue()


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BATCHAI_LOCAL_ALLOW_HOST_CHANGES", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


# A stand-in for mnist_trainer.py with its command line: real torch.distributed over gloo, initialised as
# the recipe's arguments say ($AZ_BATCHAI_PYTORCH_INIT_METHOD), reporting progress as the real one did.
MNIST_TRAINER = """
    import argparse
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int)
    p.add_argument("--world-size", type=int)
    p.add_argument("--dist-backend")
    p.add_argument("--dist-url")
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    dist.init_process_group(a.dist_backend, init_method=a.dist_url, world_size=a.world_size, rank=a.rank)
    total = torch.tensor([float(a.rank + 1)])
    dist.all_reduce(total)
    for epoch in (1, 2):
        print(f"Epoch: [{epoch}][0/469]\\tLoss {2.3 / epoch:.4f}\\trank {a.rank} of {int(total.item())}")
    dist.destroy_process_group()
"""


def test_pytorch_gpu_distributed_gloo_as_its_readme_says(
    work: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("torch")
    (work / "mnist_trainer.py").write_text(textwrap.dedent(MNIST_TRAINER))  # the README's wget
    (work / "job.json").write_text((RECIPES / "PyTorch__PyTorch-GPU-Distributed-Gloo__job.json").read_text())
    az("az group create -n batchai.recipes -l eastus")
    az("az batchai workspace create -g batchai.recipes -n recipe_workspace -l eastus")
    az(
        "az batchai cluster create -n nc6 -g batchai.recipes -w recipe_workspace -s Standard_NC6 -t 2 --generate-ssh-keys"
    )
    az("az storage account create -n <storage account name> --sku Standard_LRS -g batchai.recipes")
    az("az storage share create -n scripts --account-name <storage account name>")
    az("az storage share create -n logs --account-name <storage account name>")
    az("az storage directory create -n pytorch -s scripts --account-name <storage account name>")
    az(
        "az storage file upload -s scripts --source mnist_trainer.py --path pytorch --account-name <storage account name> "
    )
    az("az batchai experiment create -g batchai.recipes -w recipe_workspace -n pytorch_experiment")
    az(
        "az batchai job create -c nc6 -n distributed_pytorch -g batchai.recipes -w recipe_workspace -e pytorch_experiment -f job.json --storage-account-name <storage account name>"
    )
    assert (
        "containerSettings skipped: image pytorch/pytorch:0.4_cuda9_cudnn7" in caplog.text
    )  # cannot run here
    # "The training script is reporting the training progress in stdout-0.txt"
    out, _ = az(
        "az batchai job file stream -j distributed_pytorch -g batchai.recipes -w recipe_workspace -e pytorch_experiment -f stdout-0.txt"
    )
    assert out.splitlines() == [
        "Epoch: [1][0/469]\tLoss 2.3000\trank 0 of 3",
        "Epoch: [2][0/469]\tLoss 1.1500\trank 0 of 3",
    ]
    listed, _ = az(
        "az batchai job file list -j distributed_pytorch -g batchai.recipes -w recipe_workspace -e pytorch_experiment"
    )
    names = {f["name"] for f in json.loads(listed)}
    assert {
        "stdout.txt",
        "stderr.txt",
        "stdout-0.txt",
        "stdout-1.txt",
        "stderr-0.txt",
        "stderr-1.txt",
    } <= names
    out, _ = az(
        "az batchai job file stream -j distributed_pytorch -g batchai.recipes -w recipe_workspace -e pytorch_experiment -f stdout-1.txt"
    )
    assert [line.rsplit("\t", 1)[1] for line in out.splitlines()] == ["rank 1 of 3"] * 2
    segment, _ = az(
        "az batchai job show -n distributed_pytorch -g batchai.recipes -w recipe_workspace -e pytorch_experiment --query jobOutputDirectoryPathSegment"
    )
    assert "pytorch_experiment/jobs/distributed_pytorch" in json.loads(segment)
    az("az batchai group delete -n batchai.recipes -y")


CONVOLUTIONAL = """
    import os, sys
    print("TensorFlow stand-in on", os.environ["AZ_BATCHAI_TASK_INDEX"], sys.argv[1:])
    print("Step 0 (epoch 0.00), 5.1 ms")
"""


def test_tensorflow_gpu_as_its_readme_says(work: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The 2018-05-01 recipe (its job.json mounts shares ``logs`` and ``scripts`` of the account named at job
    create, the script under ``scripts/tensorflow``)."""
    (work / "convolutional.py").write_text(textwrap.dedent(CONVOLUTIONAL))
    (work / "job.json").write_text((RECIPES / "TensorFlow__TensorFlow-GPU__job.json").read_text())
    az("az group create -n batchai.recipes -l eastus")
    az("az batchai workspace create -g batchai.recipes -n recipe_workspace -l eastus")
    az(
        "az batchai cluster create -n nc6 -g batchai.recipes -w recipe_workspace -s Standard_NC6 -t 1 --generate-ssh-keys"
    )
    az("az storage account create -n <storage account name> --sku Standard_LRS -g batchai.recipes")
    az("az storage share create -n scripts --account-name <storage account name>")
    az("az storage share create -n logs --account-name <storage account name>")
    az("az storage directory create -n tensorflow -s scripts --account-name <storage account name>")
    az(
        "az storage file upload -s scripts --source convolutional.py --path tensorflow --account-name <storage account name>"
    )
    az("az batchai experiment create -g batchai.recipes -w recipe_workspace -n tensorflow_experiment")
    az(
        "az batchai job create -c nc6 -n tensorflow -g batchai.recipes -w recipe_workspace -e tensorflow_experiment -f job.json --storage-account-name <storage account name>"
    )
    assert (
        "containerSettings skipped: image tensorflow/tensorflow:1.8.0-gpu" in caplog.text
    )  # cannot run here
    out, _ = az(
        "az batchai job file stream -j tensorflow -g batchai.recipes -w recipe_workspace -e tensorflow_experiment -f stdout-wk-0.txt"
    )
    assert out.splitlines() == ["TensorFlow stand-in on 0 []", "Step 0 (epoch 0.00), 5.1 ms"]
    out, _ = az(
        "az batchai job show -n tensorflow -g batchai.recipes -w recipe_workspace -e tensorflow_experiment --query executionState"
    )
    assert json.loads(out) == "succeeded"
    az("az batchai group delete -n batchai.recipes -y")


QUICKSTART_TRAIN = """
    import os
    out = os.path.join(os.environ["AZ_BATCHAI_MOUNT_ROOT"], "autobfs", "model.txt")
    open(out, "w").write("trained\\n")
    print("read", open(os.path.join(os.environ["AZ_BATCHAI_MOUNT_ROOT"], "autobfs", "data.txt")).read().strip())
"""


def test_auto_storage_mounts_a_share_and_a_container_the_storage_commands_reach(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's cluster (``--use-auto-storage``): its share and container are the ones ``storage
    file``/``storage blob`` commands of the auto-storage account read and write."""
    (work / "train.py").write_text(textwrap.dedent(QUICKSTART_TRAIN))
    (work / "data.txt").write_text("mnist\n")
    az("az group create --name myResourceGroup --location eastus")
    az("az batchai workspace create --workspace myworkspace --resource-group myResourceGroup")
    _, err = az(
        "az batchai cluster create --name mycluster --workspace myworkspace --resource-group myResourceGroup --vm-size Standard_NC6 --use-auto-storage --target 1 --user-name myusername --generate-ssh-keys"
    )
    assert "batchaiautostorage" in err
    shown, _ = az(
        "az batchai cluster show --name mycluster --workspace myworkspace --resource-group myResourceGroup --query nodeSetup.mountVolumes"
    )
    volumes = json.loads(shown)
    account = volumes["azureFileShares"][0]["accountName"]
    assert volumes["azureFileShares"][0]["relativeMountPath"] == "autoafs"
    assert volumes["azureBlobFileSystems"][0] == {
        "accountName": account, "containerName": "batchaicontainer", "relativeMountPath": "autobfs",
    }  # fmt: skip
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", account)  # as the quickstart exports it
    az("az storage directory create --share-name batchaishare --name scripts")
    az("az storage file upload --share-name batchaishare --source train.py --path scripts")
    az("az storage blob upload --container-name batchaicontainer --file data.txt --name data.txt")
    az("az batchai experiment create -g myResourceGroup -w myworkspace -n quickstart")
    az(
        "az batchai job create -n j -c mycluster -g myResourceGroup -w myworkspace -e quickstart --python-script $AZ_BATCHAI_MOUNT_ROOT/autoafs/scripts/train.py --toolkit tensorflow"
    )
    out, _ = az(
        "az batchai job file stream -j j -g myResourceGroup -w myworkspace -e quickstart -f stdout.txt"
    )
    assert out.splitlines() == ["read mnist"]
    listed, _ = az("az storage blob list --container-name batchaicontainer")
    assert sorted(b["name"] for b in json.loads(listed)) == ["data.txt", "model.txt"]
    az("az storage blob download --container-name batchaicontainer --name model.txt --file model.txt")
    assert (work / "model.txt").read_text() == "trained\n"
    # a second cluster with auto-storage reuses the account, as az did
    _, err = az(
        "az batchai cluster create --name second --workspace myworkspace --resource-group myResourceGroup --use-auto-storage --target 1"
    )
    shown, _ = az(
        "az batchai cluster show --name second --workspace myworkspace --resource-group myResourceGroup --query nodeSetup.mountVolumes.azureFileShares[0].accountName"
    )
    assert json.loads(shown) == account
    az("az group delete --name myResourceGroup --yes")


# -- every recipe's README, step by step -------------------------------------------------------------

STEPS = Path(__file__).parent / "data" / "recipe_readmes"  # each README's az/wget lines, verbatim
# The 2017 CLI (no workspace; `job create -r CLUSTER -c job.json`; `cluster create --afs-name` of a share
# named by environment variables): Batch AI's 2018-05-01 API retired it, and so does batchai. The same job
# files run through 2018 steps in tests/test_batchai_recipes.py.
RETIRED_CLI = {"CNTK__CNTK-GPU-BrainScript", "CNTK__CNTK-GPU-BrainScript-Distributed"}
# A README's own mistake: the step fails here as it did on Batch AI.
README_ERRORS = {
    ("Chainer__Chainer-GPU-Distributed-Infiniband", "job file list -j distributed_chainer "): (
        "the README lists job distributed_chainer, which it never created (it made distributed_chainer_ib)"
    ),
}
# What a recipe's script does here: print where it runs (stdout and stderr), as the real ones reported
# progress. A job-preparation script also fetches the Horovod benchmark's script, as the real one cloned it.
STAND_IN = """
    import os, sys
    line = f"stand-in {os.path.basename(sys.argv[0])} task {os.environ.get('AZ_BATCHAI_TASK_INDEX')}"
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
"""
PREP_SCRIPT = """#!/bin/bash
echo "stand-in $0"
mkdir -p "$AZ_BATCHAI_JOB_TEMP/benchmarks/scripts/tf_cnn_benchmarks"
cp "{stand_in}" "$AZ_BATCHAI_JOB_TEMP/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py"
"""


def _local_inputs(argv: list[str], work: Path) -> None:
    """The files an upload step names, where the README's `wget`/unzip made them: stand-ins."""
    for flag in ("--source", "--file", "-s"):
        if flag not in argv[:-1]:
            continue
        value = argv[argv.index(flag) + 1]
        if argv[1:3] == ["file", "upload"] or argv[1:3] == ["blob", "upload"] or "upload-batch" in argv:
            path = work / value
            if path.exists():
                return
            if "upload-batch" in argv:
                path.mkdir(parents=True)
                (path / "sample-0.bin").write_bytes(b"data")
            elif path.suffix == ".py":
                path.write_text(textwrap.dedent(STAND_IN))
            elif path.suffix == ".sh":
                path.write_text(PREP_SCRIPT.format(stand_in=work / "stand_in.py"))
                path.chmod(0o755)
            else:
                path.write_text("stand-in data\n")
            return


@pytest.mark.parametrize("recipe", sorted(p.stem for p in STEPS.glob("*.txt")))
def test_every_recipe_readme_runs_step_by_step(
    work: Path, recipe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if recipe in RETIRED_CLI:  # its storage steps name no account: the 2017 docs set it in the environment
        monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", ACCOUNT)
    (work / "stand_in.py").write_text(textwrap.dedent(STAND_IN))
    lines = [ln for ln in (STEPS / f"{recipe}.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    default_job = RECIPES / f"{recipe}__job.json"
    if default_job.exists():  # the README's job.json "in this folder"
        (work / "job.json").write_text(default_job.read_text())
    streamed = 0
    for i, line in enumerate(lines, 1):
        if line.startswith("wget"):
            m = re.search(r"-O job\.json (\S+)", line)
            if m:  # the recipe's job file, from the copy beside this test (no network here)
                file = "__".join(m.group(1).split("/recipes/", 1)[1].split("/"))
                (work / "job.json").write_text((RECIPES / file).read_text())
            continue  # downloads: no network here; the uploads below find stand-ins instead
        if recipe in RETIRED_CLI and line.startswith("az batchai"):
            pytest.skip(f"step {i} ({line}): the 2017 CLI, retired with Batch AI's 2018-05-01 API")
        argv = shlex.split(line.replace("<storage account name>", ACCOUNT))[1:]
        _local_inputs(argv, work)
        mistake = next(
            (why for (r, step), why in README_ERRORS.items() if r == recipe and step in line), None
        )
        if mistake:
            _, err = az(line, status=1)
            assert "not found" in err, mistake
            continue
        out, _ = az(line)
        if argv[:4] == ["batchai", "job", "file", "stream"]:
            assert "stand-in" in out, f"step {i} ({line}) streamed:\n{out}"
            streamed += 1
        if argv[:3] == ["batchai", "job", "show"] and "jobOutputDirectoryPathSegment" in line:
            assert "/jobs/" in json.loads(out)
    assert streamed or "job file stream" not in "\n".join(lines)
