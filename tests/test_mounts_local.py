"""Mounts on the local backend, with real jobs: each storage a mount names is a folder of the workspace root
(two jobs or clusters naming the same share see the same files), a cluster's mounts are links under its
mount root, a job's under its job mount root, and a Batch AI job file naming a cluster mount that this
cluster does not declare runs unchanged (the folder is made, with a note)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from _configs import recipe_mount_volumes
from batchai_sdk import AzureBlobContainer, AzureFileShare, Job, JobState, UnmanagedFileSystem, Workspace

pytestmark = pytest.mark.mpi
KEY = "bG9jYWwtc3RvcmFnZS1rZXk9PQ=="

# A job.json in the shape of Microsoft's recipes (Horovod-Tensorflow, batch scoring): the logs share first
# (the workspace share here), a scripts share and a blob container of its own; a custom toolkit keeps it fast.
RECIPE: dict[str, Any] = {
    "$schema": "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json",
    "properties": {
        "nodeCount": 1,
        "customToolkitSettings": {
            "commandLine": "cat $AZ_BATCHAI_JOB_MOUNT_ROOT/scripts/hello.txt > $AZ_BATCHAI_JOB_MOUNT_ROOT/data/out.txt"
            " && ls $AZ_BATCHAI_JOB_MOUNT_ROOT/data && echo logs at $AZ_BATCHAI_STDOUTERR_DIR"
        },
        "stdOutErrPathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/logs",
        "mountVolumes": recipe_mount_volumes(),
    },
}


def run(job: Job) -> list[str]:
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    return list(job.stream("stdout.txt", follow=False))


def test_a_recipe_with_several_shares_and_a_blob_container_runs_and_its_storage_is_shared(
    ws: Workspace,
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    ws.storage(AzureFileShare("scripts", "acct", "scripts")).write_text("hello.txt", "hello from a share\n")
    ws.storage(AzureBlobContainer("data", "acct", "data"))  # a container must exist before a job mounts it
    doc = copy.deepcopy(RECIPE)
    doc["properties"]["mountVolumes"]["azureBlobFileSystems"][0]["credentials"] = {
        "accountKey": "<AZURE_BATCHAI_STORAGE_KEY>"
    }
    job = Job.from_batchai_json(
        doc, experiment=exp, cluster=cluster, name="j1", storage_account="acct", storage_key=KEY
    )
    lines = run(job)
    assert "out.txt" in lines
    # the key reached the mount in memory and nothing the workspace wrote
    assert job.spec.mounts[1].account_key == KEY  # type: ignore[union-attr]
    written = [p for p in Path(ws.backend.root).rglob("*") if p.is_file() and not p.is_symlink()]  # type: ignore[attr-defined]
    assert written and not [p for p in written if KEY.encode() in p.read_bytes()]
    # the logs share is the workspace share: the logs are on it, where job.files() reads them
    assert ws.share.exists(f"{job.paths.stdouterr}/stdout.txt")
    # the blob container is one folder, whatever path a job mounts it at
    other = AzureBlobContainer("blob", "acct", "data")
    assert ws.storage(other).read_text("out.txt") == "hello from a share\n"
    doc = copy.deepcopy(RECIPE)
    doc["properties"]["mountVolumes"]["azureBlobFileSystems"][0]["relativeMountPath"] = "blob"
    doc["properties"]["customToolkitSettings"]["commandLine"] = "cat $AZ_BATCHAI_JOB_MOUNT_ROOT/blob/out.txt"
    assert run(
        Job.from_batchai_json(doc, experiment=exp, cluster=cluster, name="j2", storage_account="acct")
    ) == ["hello from a share"]


def test_cluster_mounts_are_shared_by_clusters_naming_the_same_storage(ws: Workspace, tmp_path: Path) -> None:
    afs = AzureFileShare("afs", "acct", "shared")
    writer = ws.create_cluster("writer", nodes=1, mounts=[afs])
    reader = ws.create_cluster("reader", nodes=1, mounts=[AzureFileShare("team", "acct", "shared")])
    exp = ws.create_experiment("e")
    ws.share.write_text("in.txt", "on the workspace share\n")
    run(
        exp.create_job(
            "w", cluster=writer, toolkit="custommpi",
            command_line="cp $AZ_BATCHAI_MOUNT_ROOT/share/in.txt $AZ_BATCHAI_MOUNT_ROOT/afs/copied.txt",
        )
    )  # fmt: skip
    lines = run(
        exp.create_job(
            "r",
            cluster=reader,
            toolkit="custommpi",
            command_line="cat $AZ_BATCHAI_MOUNT_ROOT/team/copied.txt",
        )
    )
    assert lines == ["on the workspace share"]
    assert ws.storage(afs).read_text("copied.txt") == "on the workspace share\n"
    # the cluster record names its mounts (no key ever), and `cluster show` as Batch AI did
    assert ws.get_cluster("writer").spec.mounts == (afs,)
    assert ws.get_cluster("writer").to_dict()["nodeSetup"]["mountVolumes"] == {
        "azureFileShares": [
            {
                "accountName": "acct",
                "azureFileUrl": "https://acct.file.core.windows.net/shared",
                "relativeMountPath": "afs",
            }
        ]
    }


def test_the_tensorflow_quickstart_paths_run_unchanged_on_a_cluster_that_declares_nothing(
    ws: Workspace,
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    doc = {
        "properties": {
            "customToolkitSettings": {
                "commandLine": "mkdir -p $AZ_BATCHAI_MOUNT_ROOT/autoafs/logs && echo run > $AZ_BATCHAI_MOUNT_ROOT/autoafs/logs/x"
                " && cat $AZ_BATCHAI_MOUNT_ROOT/autoafs/logs/x"
            },
            "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/autoafs/logs",
        }
    }
    job = Job.from_batchai_json(doc, experiment=exp, cluster=cluster, name="tf")
    assert run(job) == ["run"]
    notes = ws.share.read_json(job.paths.run_dir + "/launch.json")["notes"]
    assert any("autoafs is not a mount of cluster 'c'" in note for note in notes)
    # what the job wrote there outlives the cluster, as storage did
    cluster.delete()
    kept = Path(ws.backend.root) / "storage" / "undeclared" / "c" / "autoafs" / "logs" / "x"  # type: ignore[attr-defined]
    assert kept.read_text() == "run\n"
    assert not (Path(ws.backend.root) / "clusters" / "c").exists()  # type: ignore[attr-defined]


def test_an_unmanaged_file_system_is_a_folder_locally(ws: Workspace) -> None:
    fs = UnmanagedFileSystem("gluster", mount_command="mount -t glusterfs 10.0.0.4:/gv0")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    run(exp.create_job("a", cluster=cluster, toolkit="custommpi", mounts=[fs],
                       command_line="echo 1 > $AZ_BATCHAI_JOB_MOUNT_ROOT/gluster/a.txt"))  # fmt: skip
    assert ws.storage(fs).read_text("a.txt") == "1\n"
