"""One storage model (docs/storage.md): a file share is (account, share), a blob container (account,
container), one storage wherever it is named — ``batchai storage``, ``ws.share``/``ws.storage(...)``, job.json
``mountVolumes``, ``cluster create --afs-name``. Bad input gets typed errors naming what to run; an old
one-share registry keeps working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchai_sdk import AzureBlobContainer, AzureFileShare, JobState, Workspace
from batchai_sdk.cli import main
from batchai_sdk.exceptions import NotFoundError

RG = ["-g", "g", "-w", "w"]
ACCOUNT = ["--account-name", "acct"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> tuple[str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return out, err


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """Group g, workspace w with a 1-node cluster c, storage account acct; the working directory a temp."""
    monkeypatch.chdir(tmp_path)
    cli(capsys, "group", "create", "-n", "g", "-l", "eastus")
    cli(capsys, "workspace", "create", *RG)
    cli(capsys, "experiment", "create", *RG, "-n", "e")
    cli(capsys, "cluster", "create", *RG, "-n", "c", "-t", "1")
    cli(capsys, "storage", "account", "create", "-g", "g", "-n", "acct")
    return tmp_path


def job_json(path: Path, script: str, *shares: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "properties": {
                    "nodeCount": 1,
                    "customToolkitSettings": {"commandLine": f"python {script}"},
                    "mountVolumes": {
                        "azureFileShares": [
                            {
                                "azureFileUrl": f"https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/{s}",
                                "relativeMountPath": s,
                            }
                            for s in shares
                        ]
                    },
                }
            }
        )
    )
    return path


def test_several_shares_of_an_account_are_each_one_storage_wherever_named(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "storage", "share", "create", "-n", "scripts", *ACCOUNT)  # the workspace's own (its first)
    cli(capsys, "storage", "share", "create", "-n", "logs", *ACCOUNT)  # a share of its own
    listed = json.loads(cli(capsys, "storage", "share", "list", *ACCOUNT)[0])
    assert listed == [{"name": "logs", "workspace": None}, {"name": "scripts", "workspace": "w"}]
    (lab / "train.py").write_text(
        "import os\nroot = os.environ['AZ_BATCHAI_JOB_MOUNT_ROOT']\n"
        "print(open(os.path.join(root, 'logs', 'in.txt')).read().strip())\n"
        "open(os.path.join(root, 'logs', 'out.txt'), 'w').write('written by the job\\n')\n"
    )
    (lab / "in.txt").write_text("uploaded to logs\n")
    cli(
        capsys,
        "storage",
        "file",
        "upload",
        "-s",
        "scripts",
        "--source",
        "train.py",
        "--path",
        "code",
        *ACCOUNT,
    )
    cli(capsys, "storage", "file", "upload", "-s", "logs", "--source", "in.txt", *ACCOUNT)
    # the job's first share is logs, not the workspace's: each share is mounted as itself
    doc = job_json(lab / "job.json", "$AZ_BATCHAI_JOB_MOUNT_ROOT/scripts/code/train.py", "logs", "scripts")
    job = [*RG, "-e", "e", "-n", "j"]
    cli(capsys, "job", "create", *job, "-c", "c", "-f", str(doc), "--storage-account-name", "acct")
    out, _ = cli(capsys, "job", "file", "stream", *RG, "-e", "e", "-j", "j", "-f", "stdout.txt")
    assert out.splitlines() == ["uploaded to logs"]
    downloaded = lab / "got.txt"
    cli(
        capsys,
        "storage",
        "file",
        "download",
        "-s",
        "logs",
        "-p",
        "out.txt",
        "--dest",
        str(downloaded),
        *ACCOUNT,
    )
    assert downloaded.read_text() == "written by the job\n"
    # Python's doors reach the same storage: ws.storage for any share, ws.share for the workspace's own
    ws = Workspace.from_cli("g", "w")
    assert ws.storage(AzureFileShare("x", "acct", "logs")).read_text("out.txt") == "written by the job\n"
    assert ws.share.exists("code/train.py")
    assert ws.storage(AzureFileShare("y", "acct", "scripts")).exists("code/train.py")
    # a cluster's --afs-name of a share that is not the workspace's: the same folder again
    cli(capsys, "cluster", "create", *RG, "-n", "c2", "-t", "1", "--storage-account-name", "acct",
        "--afs-name", "logs")  # fmt: skip
    cli(capsys, "job", "create", *RG, "-e", "e", "-n", "k", "-c", "c2",
        "--command-line", "cat $AZ_BATCHAI_MOUNT_ROOT/afs/out.txt", "--toolkit", "custom")  # fmt: skip
    out, _ = cli(capsys, "job", "file", "stream", *RG, "-e", "e", "-j", "k", "-f", "stdout.txt")
    assert out.splitlines() == ["written by the job"]


def test_upload_to_a_share_nobody_created_names_the_command_that_makes_it(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (lab / "a.py").write_text("print(1)\n")
    _, err = cli(capsys, "storage", "file", "upload", "-s", "ghost", "--source", "a.py", *ACCOUNT, status=1)
    assert "file share 'ghost' not found" in err
    assert "batchai storage share create --name ghost --account-name acct" in err
    _, err = cli(capsys, "storage", "blob", "upload", "-c", "ghost", "-f", "a.py", "-n", "a.py", *ACCOUNT,
                 status=1)  # fmt: skip
    assert "batchai storage container create --name ghost --account-name acct" in err
    # a cluster's --afs-name/--bfs-name of storage nobody created
    _, err = cli(capsys, "cluster", "create", *RG, "-n", "c9", "--storage-account-name", "acct",
                 "--afs-name", "ghost", status=1)  # fmt: skip
    assert "batchai storage share create --name ghost --account-name acct" in err
    _, err = cli(capsys, "cluster", "create", *RG, "-n", "c9", "--storage-account-name", "acct",
                 "--bfs-name", "ghost", status=1)  # fmt: skip
    assert "batchai storage container create --name ghost --account-name acct" in err


@pytest.mark.parametrize("name", ["../escape.py", "a/../../b.py", "a/./b.py", "/abs.py", "a//b.py"])
def test_a_blob_name_outside_its_container_is_refused(
    lab: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    cli(capsys, "storage", "container", "create", "-n", "data", *ACCOUNT)
    (lab / "a.py").write_text("print(1)\n")
    _, err = cli(
        capsys, "storage", "blob", "upload", "-c", "data", "-f", "a.py", "-n", name, *ACCOUNT, status=1
    )
    assert "blob name" in err and repr(name) in err
    assert not (lab / "escape.py").exists() and not list(lab.parent.glob("escape.py"))
    listed = json.loads(cli(capsys, "storage", "blob", "list", "-c", "data", *ACCOUNT)[0])
    assert listed == []


def test_a_job_mounting_a_share_nobody_created_is_refused_at_create(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "storage", "share", "create", "-n", "scripts", *ACCOUNT)
    doc = job_json(lab / "job.json", "-c 'print(1)'", "scripts", "ghostlogs")
    _, err = cli(capsys, "job", "create", *RG, "-e", "e", "-n", "j", "-c", "c", "-f", str(doc),
                 "--storage-account-name", "acct", status=1)  # fmt: skip
    assert "file share 'ghostlogs' not found in storage account 'acct'" in err
    assert "batchai storage share create --name ghostlogs --account-name acct" in err
    assert json.loads(cli(capsys, "job", "list", *RG, "-e", "e")[0]) == []  # nothing was submitted
    # the same through Python, for a blob container
    ws = Workspace.from_cli("g", "w")
    exp = ws.get_experiment("e")
    with pytest.raises(NotFoundError, match="batchai storage container create --name data"):
        exp.create_job(
            "p", cluster="c", command_line="true", toolkit="custom",
            mounts=[AzureBlobContainer("data", "acct", "data")],
        ).submit()  # fmt: skip


def test_a_script_or_input_missing_on_a_mount_is_refused_naming_the_path_and_the_mount(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "storage", "share", "create", "-n", "scripts", *ACCOUNT)
    cli(capsys, "storage", "share", "create", "-n", "other", *ACCOUNT)
    written = "$AZ_BATCHAI_JOB_MOUNT_ROOT/other/pytorch/missing.py"
    doc = {
        "properties": {
            "nodeCount": 1,
            "pyTorchSettings": {"pythonScriptFilePath": written},
            "mountVolumes": {
                "azureFileShares": [
                    {
                        "azureFileUrl": "https://acct.file.core.windows.net/scripts",
                        "relativeMountPath": "scripts",
                    },
                    {
                        "azureFileUrl": "https://acct.file.core.windows.net/other",
                        "relativeMountPath": "other",
                    },
                ]
            },
        }
    }
    (lab / "job.json").write_text(json.dumps(doc))
    _, err = cli(capsys, "job", "create", *RG, "-e", "e", "-n", "j", "-c", "c", "-f", "job.json", status=1)
    assert f"script '{written}' not found" in err
    assert "mount $AZ_BATCHAI_JOB_MOUNT_ROOT/other (azure file share acct/other" in err
    # an input directory on a cluster's mount
    cli(capsys, "cluster", "create", *RG, "-n", "ext", "-t", "1", "--storage-account-name", "acct",
        "--afs-name", "other", "--afs-mount-path", "external")  # fmt: skip
    (lab / "in.py").write_text("print('ok')\n")
    cli(capsys, "storage", "file", "upload", "-s", "other", "--source", "in.py", "--path", "pytorch/missing.py",
        *ACCOUNT)  # fmt: skip
    doc["properties"]["inputDirectories"] = [{"id": "DATA", "path": "$AZ_BATCHAI_MOUNT_ROOT/external/data"}]
    (lab / "job.json").write_text(json.dumps(doc))
    _, err = cli(capsys, "job", "create", *RG, "-e", "e", "-n", "j", "-c", "ext", "-f", "job.json", status=1)
    assert "input directory DATA '$AZ_BATCHAI_MOUNT_ROOT/external/data' not found" in err
    assert "mount $AZ_BATCHAI_MOUNT_ROOT/external" in err
    cli(capsys, "storage", "directory", "create", "-n", "data", "-s", "other", *ACCOUNT)
    cli(capsys, "job", "create", *RG, "-e", "e", "-n", "j", "-c", "ext", "-f", "job.json")
    assert (
        Workspace.from_cli("g", "w").get_experiment("e").get_job("j").wait(timeout=120) is JobState.SUCCEEDED
    )


def test_an_old_one_share_registry_keeps_working(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The old layout: every share an account named was a workspace's share (``{"shares": {name: ws}}``),
    its files on the workspace's share. Opening the workspace makes that share the storage every mount
    of (acct, myshare) names; the files written before stay where they were."""
    home = Path(__import__("os").environ["BATCHAI_HOME"])
    record = home / "groups" / "g" / "group.json"
    group = json.loads(record.read_text())
    group["storageAccounts"]["acct"]["shares"] = {"myshare": "w"}  # as the old CLI wrote it
    record.write_text(json.dumps(group))
    Workspace.from_cli("g", "w").share.write_text("cifar/old.py", "print('from before')\n")
    listed = json.loads(cli(capsys, "storage", "file", "list", "-s", "myshare", "-p", "cifar", *ACCOUNT)[0])
    assert [f["name"] for f in listed] == ["old.py"]
    # a cluster mounting it by name (not the job's first share) sees the old files
    cli(capsys, "cluster", "create", *RG, "-n", "c2", "-t", "1", "--storage-account-name", "acct",
        "--afs-name", "myshare")  # fmt: skip
    cli(capsys, "job", "create", *RG, "-e", "e", "-n", "j", "-c", "c2", "--toolkit", "tensorflow",
        "--python-script", "$AZ_BATCHAI_MOUNT_ROOT/afs/cifar/old.py")  # fmt: skip
    out, _ = cli(capsys, "job", "file", "stream", *RG, "-e", "e", "-j", "j", "-f", "stdout.txt")
    assert out.splitlines() == ["from before"]
    # and a new share beside it is a share of its own
    cli(capsys, "storage", "share", "create", "-n", "logs", *ACCOUNT)
    shown = json.loads(cli(capsys, "storage", "account", "show", "-n", "acct")[0])
    assert shown["shares"] == {"myshare": "w", "logs": None}


def test_shares_and_containers_are_deleted_as_az_deletes_them(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli(capsys, "storage", "share", "create", "-n", "scripts", *ACCOUNT)  # the workspace's own
    cli(capsys, "storage", "share", "create", "-n", "logs", *ACCOUNT)
    cli(capsys, "storage", "container", "create", "-n", "data", *ACCOUNT)
    (lab / "a.txt").write_text("a\n")
    cli(capsys, "storage", "file", "upload", "-s", "logs", "--source", "a.txt", *ACCOUNT)
    cli(capsys, "storage", "blob", "upload", "-c", "data", "-f", "a.txt", "-n", "x/a.txt", *ACCOUNT)
    cli(capsys, "storage", "blob", "delete", "-c", "data", "-n", "x/a.txt", *ACCOUNT)
    assert json.loads(cli(capsys, "storage", "blob", "list", "-c", "data", *ACCOUNT)[0]) == []
    _, err = cli(capsys, "storage", "share", "delete", "-n", "scripts", *ACCOUNT, status=2)
    assert "workspace 'w''s own share" in err and Workspace.from_cli("g", "w").share.exists(".batchai")
    assert json.loads(cli(capsys, "storage", "share", "delete", "-n", "logs", *ACCOUNT)[0]) == {
        "deleted": True
    }
    _, err = cli(capsys, "storage", "file", "list", "-s", "logs", *ACCOUNT, status=1)
    assert "batchai storage share create --name logs" in err
    # made again, it is empty: the files went with the share
    cli(capsys, "storage", "share", "create", "-n", "logs", *ACCOUNT)
    assert json.loads(cli(capsys, "storage", "file", "list", "-s", "logs", *ACCOUNT)[0]) == []
    assert json.loads(cli(capsys, "storage", "container", "delete", "-n", "data", *ACCOUNT)[0]) == {
        "deleted": True
    }
    assert json.loads(cli(capsys, "storage", "container", "list", *ACCOUNT)[0]) == []
