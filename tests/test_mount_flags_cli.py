"""The az CLI's mount flags (``--afs-name``, ``--bfs-name``, ``--nfs`` with their mount paths and the storage
account) on ``batchai cluster create`` and ``job create``: they become the cluster's and the job's mounts,
added to a file's ``mountVolumes``; the key comes from ``$AZURE_BATCHAI_STORAGE_KEY`` or, with a warning,
from the flag, and is written nowhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchai_sdk import AzureBlobContainer, AzureFileShare, FileServer, JobState, Workspace
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi
KEY = "ZmxhZy1zdG9yYWdlLWtleS12YWx1ZT09"
NFS_ID = "/subscriptions/0/resourceGroups/g/providers/Microsoft.BatchAI/workspaces/w/fileServers/nfs1"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cluster_and_job_flags_mount_what_az_mounted_and_the_key_stays_out_of_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ws"
    at = ["--root", str(root)]
    monkeypatch.setenv("AZURE_BATCHAI_STORAGE_KEY", KEY)
    code, _, err = cli(capsys, "cluster", "create", *at, "-n", "c", "--storage-account-name", "acct",
                       "--afs-name", "logs")  # fmt: skip
    assert code == 1 and "batchai storage share create --name logs --account-name acct" in err
    Workspace.local(root=root).storage(AzureFileShare("x", "acct", "logs"))  # the storage exists first
    Workspace.local(root=root).storage(AzureBlobContainer("x", "acct", "data"))
    code, _, err = cli(
        capsys, "cluster", "create", *at, "-n", "c", "-t", "1", "--storage-account-name", "acct",
        "--afs-name", "logs", "--bfs-name", "data", "--bfs-mount-path", "blob", "--nfs", NFS_ID,
    )  # fmt: skip
    assert code == 0, err
    assert "--storage-account-key" not in err  # the key came from the environment: no warning
    ws = Workspace.local(root=root)
    assert ws.get_cluster("c").spec.mounts == (
        AzureFileShare("afs", "acct", "logs"),
        AzureBlobContainer("blob", "acct", "data"),
        FileServer("nfs", "nfs1"),
    )
    ws.create_experiment("e")
    ws.storage(AzureBlobContainer("x", "acct", "data")).write_text("in.txt", "from the container\n")
    ws.storage(AzureFileShare("y", "acct", "scripts"))  # the job's share exists, as on Azure
    # a job's own share, the key given on the command line: used, with a warning
    code, out, err = cli(
        capsys, "job", "create", *at, "-e", "e", "-n", "j", "-c", "c", "--storage-account-name", "acct",
        "--storage-account-key", KEY, "--afs-name", "scripts", "--afs-mount-path", "s", "-o", "json",
        "--command-line", "cat $AZ_BATCHAI_MOUNT_ROOT/blob/in.txt > $AZ_BATCHAI_JOB_MOUNT_ROOT/s/out.txt",
    )  # fmt: skip
    assert code == 0, err
    assert "--storage-account-key puts the key in this command's argv" in err
    assert "AZURE_BATCHAI_STORAGE_KEY" in err
    job = ws.get_experiment("e").get_job("j")
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.spec.mounts == (AzureFileShare("s", "acct", "scripts"),)
    assert ws.storage(AzureFileShare("y", "acct", "scripts")).read_text("out.txt") == "from the container\n"
    assert KEY not in out and KEY not in err
    written = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert written and [p for p in written if KEY.encode() in p.read_bytes()] == []


def test_flags_add_to_a_file_s_mounts_and_mistakes_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ws"
    at = ["--root", str(root)]
    monkeypatch.delenv("AZURE_BATCHAI_STORAGE_ACCOUNT", raising=False)
    doc = {
        "properties": {
            "scaleSettings": {"manual": {"targetNodeCount": 1}},
            "nodeSetup": {
                "mountVolumes": {
                    "unmanagedFileSystems": [{"mountCommand": "true", "relativeMountPath": "fs"}]
                }
            },
        }
    }
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    code, _, err = cli(capsys, "cluster", "create", *at, "-n", "f", "-f", str(path), "--nfs", "srv")
    assert code == 0, err
    mounts = Workspace.local(root=root).get_cluster("f").spec.mounts
    assert [(m.kind, m.relative_mount_path) for m in mounts] == [
        ("unmanaged_file_system", "fs"),
        ("file_server", "nfs"),
    ]
    code, _, err = cli(capsys, "cluster", "create", *at, "-n", "g", "--afs-name", "logs")
    assert code != 0 and "--storage-account-name" in err and "Traceback" not in err
    code, _, err = cli(capsys, "cluster", "create", *at, "-n", "g", "--bfs-mount-path", "b")
    assert code != 0 and "--bfs-mount-path needs --bfs-name" in err
    code, _, err = cli(
        capsys, "cluster", "create", *at, "-n", "g", "--storage-account-name", "acct", "--afs-name", "Bad_Name",
    )  # fmt: skip
    assert code != 0 and "share_name" in err and "Bad_Name" in err
