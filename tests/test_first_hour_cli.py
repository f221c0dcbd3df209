"""The first hour across Python and the CLI: one workspace both see, storage commands that recover from a
wrong step, a project of several files launched from the CLI with its toolkit, and the hint a lone script's
missing sibling module gets."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi


def cli(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> tuple[str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return out, err


def test_python_and_the_cli_see_the_same_default_workspace(capsys: pytest.CaptureFixture[str]) -> None:
    ws = Workspace.local()  # $BATCHAI_HOME, which the CLI also defaults to
    cluster = ws.create_cluster("c", nodes=1)
    exp = ws.create_experiment("e")
    exp.create_job("from-python", cluster=cluster, command_line="echo py").submit().wait(timeout=120)

    listed = json.loads(cli(capsys, "job", "list", "-e", "e")[0])
    assert [(j["name"], j["executionState"], j["resourceGroup"]) for j in listed] == [
        ("from-python", "succeeded", None)
    ]
    out, _ = cli(capsys, "job", "create", "-e", "e", "-c", "c", "-n", "from-cli", "--command-line",
                 "echo cli", "--stream")  # fmt: skip
    assert out.splitlines() == ["cli"]
    assert sorted(j.name for j in Workspace.local().get_experiment("e").list_jobs()) == [
        "from-cli",
        "from-python",
    ]
    # a failed job's hint names the same workspace again: no -g/-w to copy
    _, err = cli(capsys, "job", "create", "-e", "e", "-c", "c", "-n", "bad", "--command-line", "exit 3",
                 "--stream", status=3)  # fmt: skip
    assert "the full output: batchai job logs -e e -n bad --file-name stderr.txt" in err


def test_root_names_any_other_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "proj" / ".batchai"
    ws = Workspace.local(root=root)
    ws.create_experiment("cifar")
    cli(capsys, "--root", str(root), "cluster", "create", "-n", "c2", "--target", "2")
    assert ws.get_cluster("c2").node_counts.idle == 2
    names = json.loads(cli(capsys, "experiment", "list", "--root", str(root))[0])
    assert [e["name"] for e in names] == ["cifar"]
    assert json.loads(cli(capsys, "experiment", "list")[0]) == []  # the default workspace is another one
    _, err = cli(capsys, "--root", str(root), "job", "list", "-g", "g", "-e", "cifar", status=2)
    assert "--root names a workspace folder" in err


def test_storage_upload_makes_the_missing_directory_and_files_can_be_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    store = ("--share-name", "myshare", "--account-name", "mystorageaccount")
    cli(capsys, "group", "create", "-n", "g", "-l", "eastus")
    cli(capsys, "workspace", "create", "-g", "g", "-w", "w")
    cli(capsys, "storage", "account", "create", "-g", "g", "-n", "mystorageaccount")
    cli(capsys, "storage", "share", "create", "-n", "myshare", "--account-name", "mystorageaccount")
    Path("train.py").write_text("print('x')\n")
    # no `storage directory create` first: --path cifar is the directory the tutorial meant
    out, err = cli(capsys, "storage", "file", "upload", "--path", "cifar", "--source", "train.py", *store)
    assert json.loads(out)["path"] == "cifar/train.py"
    assert "created directory 'cifar'" in err
    cli(capsys, "storage", "file", "upload", "--path", "new/dir/run.py", "--source", "train.py", *store)
    listed = json.loads(cli(capsys, "storage", "file", "list", "--path", "new/dir", *store)[0])
    assert [f["name"] for f in listed] == ["run.py"]

    _, err = cli(capsys, "storage", "directory", "delete", "-n", "cifar", *store, status=2)
    assert "not empty" in err and "--recursive" in err
    cli(capsys, "storage", "file", "delete", "--path", "cifar/train.py", *store)
    cli(capsys, "storage", "directory", "delete", "-n", "cifar", *store)
    cli(capsys, "storage", "directory", "delete", "-n", "new", "--recursive", *store)
    assert [f["name"] for f in json.loads(cli(capsys, "storage", "file", "list", *store)[0])] == [".batchai"]
    _, err = cli(capsys, "storage", "file", "delete", "--path", "cifar/train.py", *store, status=1)
    assert "not found" in err
    _, err = cli(capsys, "storage", "directory", "delete", "-n", ".batchai", "--recursive", *store, status=2)
    assert "workspace's records" in err
    assert Workspace.from_cli("g", "w").share.exists(".batchai/workspace.json")


def test_a_lone_script_missing_its_sibling_module_says_pass_source_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "helpers.py").write_text("VALUE = 1\n")
    (project / "train.py").write_text("import helpers\nprint(helpers.VALUE)\n")
    ws = Workspace.local()
    cluster = ws.create_cluster("c", nodes=1)
    exp = ws.create_experiment("e")
    job = exp.create_job("lone", cluster=cluster, python_script=str(project / "train.py")).submit()
    assert job.wait(timeout=120) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert "No module named 'helpers'" in reason
    assert "only train.py was uploaded: pass source_dir=" in reason
    _, err = cli(capsys, "job", "wait", "-e", "e", "-n", "lone", status=1)
    assert "only train.py was uploaded: pass --source-dir" in err
    ok = exp.create_job("whole", cluster=cluster, source_dir=project, python_script="train.py").submit()
    assert ok.wait(timeout=120) is JobState.SUCCEEDED


DDP_MODEL = """\
import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)
"""

DDP_TRAIN = """\
import os
import time

import torch
import torch.distributed as dist
from model import make_model

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
ddp = torch.nn.parallel.DistributedDataParallel(make_model())
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
torch.manual_seed(rank)
for _ in range(3):
    opt.zero_grad()
    loss = ddp(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
weights = ddp.module.weight.detach().clone()
gathered = [torch.zeros_like(weights) for _ in range(size)]
dist.all_gather(gathered, weights)
same = all(torch.equal(gathered[0], w) for w in gathered)
print(f"rank {rank}/{size} local_rank {os.environ['LOCAL_RANK']} same_weights {same}", flush=True)
dist.destroy_process_group()
time.sleep(0.2)  # Gloo's threads finish before Python finalizes (pytorch/pytorch#190489)
"""


def test_the_cli_runs_a_two_node_pytorch_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch (the train extra)")
    monkeypatch.chdir(tmp_path)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "model.py").write_text(DDP_MODEL)
    (proj / "train.py").write_text(textwrap.dedent(DDP_TRAIN))
    cli(capsys, "cluster", "create", "-n", "c", "--target", "2")
    out, _ = cli(capsys, "job", "create", "-c", "c", "-n", "ddp", "--toolkit", "pytorch", "--source-dir",
                   "proj", "--python-script", "train.py", "--nodes", "2", "--stream")  # fmt: skip
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    assert lines == ["rank 0/2 local_rank 0 same_weights True", "rank 1/2 local_rank 0 same_weights True"]


def test_source_dir_overrides_the_job_files_script_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "helpers.py").write_text("import sys\nGREETING = 'hello ' + ' '.join(sys.argv[1:])\n")
    (proj / "train.py").write_text("from helpers import GREETING\nprint(GREETING, flush=True)\n")
    job = {
        "properties": {
            "nodeCount": 4,
            "horovodSettings": {
                "pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/gone/train.py",
                "commandLineArgs": "from",
            },
        }
    }
    Path("job.json").write_text(json.dumps(job))
    cli(capsys, "cluster", "create", "-n", "c", "--target", "2")
    cli(capsys, "experiment", "create", "-n", "e")
    out, _ = cli(capsys, "job", "create", "-c", "c", "-e", "e", "-n", "j", "-f", "job.json", "--nodes", "2",
                 "--source-dir", "proj", "--script-args", "the file", "--stream")  # fmt: skip
    assert out.splitlines() == ["hello from the file", "hello from the file"]
    _, err = cli(capsys, "job", "create", "-c", "c", "-e", "e", "-f", "job.json", "--toolkit", "pytorch",
                 status=2)  # fmt: skip
    assert "--toolkit cannot be combined with --config-file" in err
