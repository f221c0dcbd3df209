"""A job's own mounts on the Azure Batch engine: storage the pool mounts is linked from there; the rest is
mounted by the multi-instance task's coordination command on each node (keys from the task's environment
settings, never on a command line) and unmounted by the Batch job's release task once no other job on the
node uses it. At the HTTP level through the real azure-batch client (REST shapes of the service's
examples), and the coordination and release lines run for real in a private mount namespace."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import ACCOUNT
from batch_helpers import batch_workspace

from batchai_sdk import AzureBlobContainer, AzureFileShare, FileServer, UnmanagedFileSystem
from batchai_sdk import _layout as layout
from batchai_sdk.backends.azure_batch.job_mounts import STORAGE_ROOT, job_mounts
from batchai_sdk.exceptions import ValidationError

pytest.importorskip("azure.batch")

T4 = "Standard_NC4as_T4_v3"
OTHER_KEY = "b3RoZXItYWNjb3VudC1rZXktdmFsdWU9PQ=="


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Any]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        ws, arm, service, _ = batch_workspace(mock, tmp_path)
        yield ws, arm, service


def test_job_mounts_are_mounted_by_the_coordination_command_and_released_with_the_job(
    env: Any, tmp_path: Path
) -> None:
    ws, arm, service = env
    ws.create_cluster(
        "nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None,
        mounts=[AzureFileShare("shared", ACCOUNT, "data")],
    )  # fmt: skip
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    mounts = [
        AzureFileShare("data", ACCOUNT, "data"),  # the pool mounts it: linked, not mounted again
        AzureFileShare("logs", ACCOUNT, "logs"),  # the workspace's account: its key
        AzureBlobContainer("bfs", "otheracct", "images", account_key=OTHER_KEY),
        FileServer("nfs", "filer"),
    ]
    job = ws.create_experiment("e").create_job(
        "j", cluster="nc", node_count=2, python_script=str(script), mounts=mounts, secrets={"T": "tok"}
    )
    job.submit()
    (job_id,) = service.job_ids()
    batch_job = service.body_of("POST", r"^/jobs$")
    assert batch_job["jobPreparationTask"]["commandLine"] == "/bin/true"
    release = batch_job["jobReleaseTask"]
    assert release["userIdentity"] == {"autoUser": {"scope": "pool", "elevationLevel": "admin"}}
    for key in ("afs/batchaitest/logs", "blob/otheracct/images", "nfs/filer/data"):
        assert f"{STORAGE_ROOT}/.users/{key}/{job_id}" in release["commandLine"]
        assert f"umount {STORAGE_ROOT}/{key}" in release["commandLine"]
    assert "afs/batchaitest/data" not in release["commandLine"]
    task = service.body_of("POST", rf"^/jobs/{job_id}/tasks$")
    coordination = task["multiInstanceSettings"]["coordinationCommandLine"]
    assert "mount -t cifs" in coordination and "blobfuse2" in coordination and "rclone mount" in coordination
    assert "mount -t nfs" in coordination and f"{STORAGE_ROOT}/.users/nfs/filer/data/{job_id}" in coordination
    settings = {e["name"]: e["value"] for e in task["environmentSettings"]}
    inputs = {k: v for k, v in settings.items() if k.startswith("BATCHAI_MOUNT_IN_")}
    workspace_key = arm.storage_keys[0]
    assert list(inputs.values())[:2] == [workspace_key, OTHER_KEY]  # the script's stdin, line by line
    assert list(inputs.values())[2].startswith("https://otheracct.blob.core.windows.net/images?")  # rclone
    assert settings["BATCHAI_SECRET_NAMES"] == "T"  # the keys are not the job's secrets
    for line in (coordination, task["commandLine"], release["commandLine"]):
        assert workspace_key not in line and OTHER_KEY not in line
    assert f"unset {' '.join(sorted(inputs))}" in task["commandLine"]  # the launcher never sees them
    launch = ws.share.read_json(f"{layout.SHARE.run_dir('e', 'j')}/launch.json")
    links = {posixpath_name(link["path"]): link["target"] for link in launch["mount_links"]}
    assert links == {
        "data": "/mnt/batch/tasks/fsmounts/shared",
        "logs": f"{STORAGE_ROOT}/afs/batchaitest/logs",
        "bfs": f"{STORAGE_ROOT}/blob/otheracct/images",
        "nfs": f"{STORAGE_ROOT}/nfs/filer/data",
    }
    assert not [
        p for p in (tmp_path / "mounts").rglob("*") if p.is_file() and OTHER_KEY.encode() in p.read_bytes()
    ]


def posixpath_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def test_a_job_mount_of_another_account_without_its_key_is_refused_before_any_batch_job(
    env: Any, tmp_path: Path
) -> None:
    ws, _arm, service = env
    ws.create_cluster("nc", vm_size=T4, nodes=1, idle_seconds_before_scaledown=None)
    job = ws.create_experiment("e").create_job(
        "j", cluster="nc", command_line="true", mounts=[AzureBlobContainer("bfs", "otheracct", "images")]
    )
    with pytest.raises(ValidationError) as info:
        job.submit()
    assert info.value.field == "mounts[0].account_key" and "otheracct" in str(info.value)
    assert service.job_ids() == []


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_storage_two_jobs_use_on_a_node_stays_mounted_until_the_second_releases_it(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    fs = UnmanagedFileSystem("scratch", "mount -t tmpfs -o size=1m tmpfs")
    built = {
        job: job_mounts([fs], cluster_mounts=[], job_id=job, keys={}, storage_root=str(root))
        for job in ("job-a", "job-b")
    }
    a, b = built["job-a"], built["job-b"]
    assert a is not None and b is not None
    release = {j: m.release.command_line for j, m in built.items() if m is not None and m.release}
    script = "\n".join(
        [
            "set -eu",
            *a.coordination,
            f"p=$(ls -d {root}/fs/*)",  # the storage's folder (mounts.storage_key: fs/<digest>)
            'echo "x" > "$p/data.txt"',
            *b.coordination,
            'cat "$p/data.txt"',
            release["job-a"],
            'mountpoint -q "$p" && echo "still mounted for job-b"',
            release["job-b"],
            'mountpoint -q "$p" || echo "unmounted"',
        ]
    )
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/bash", "-c", script],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if out.returncode != 0 and "Operation not permitted" in out.stderr:
        pytest.skip("mount namespaces are not allowed here")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["x", "still mounted for job-b", "unmounted"]
