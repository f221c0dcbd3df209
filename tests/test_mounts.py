"""Mounts as Batch AI had them: the typed model, job.json/cluster.json mountVolumes, and the one resolver of
``$AZ_BATCHAI_MOUNT_ROOT`` / ``$AZ_BATCHAI_JOB_MOUNT_ROOT`` paths. No job runs here (see test_mounts_local)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from _configs import recipe_mount_volumes
from batchai_sdk import (
    AzureBlobContainer,
    AzureFileShare,
    BatchAIJsonError,
    FileServer,
    Job,
    JobSpec,
    UnmanagedFileSystem,
    ValidationError,
    Workspace,
)
from batchai_sdk._layout import JobPaths
from batchai_sdk._models import ClusterSpec
from batchai_sdk._mount_paths import Resolved, cluster_mounts_named, resolve
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.batchai_json.mounts import parse_mount_volumes
from batchai_sdk.batchai_json.reading import _Reader

KEY = "S3CRET-account-key=="
NAMES = {"name": "j", "experiment": "e", "cluster": "c"}

# Microsoft's Horovod recipe (microsoftarchive/BatchAI recipes/Horovod/Horovod-Tensorflow/job.json), its
# mountVolumes as written, plus a blob container as in the batch-scoring recipe.
RECIPE: dict[str, Any] = {
    "properties": {
        "nodeCount": 2,
        "horovodSettings": {
            "pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/scripts/horovod/tensorflow_mnist.py"
        },
        "stdOutErrPathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/logs",
        "mountVolumes": recipe_mount_volumes(),
    }
}
RECIPE["properties"]["mountVolumes"]["azureFileShares"][1]["credentials"] = {
    "accountKey": "<AZURE_BATCHAI_STORAGE_KEY>"
}


def parse(doc: dict[str, Any]) -> JobSpec:
    return parse_job_json(doc, **NAMES, storage_account="acct", storage_key=KEY)


def test_several_shares_and_a_blob_container_parse_into_typed_mounts() -> None:
    spec = parse(RECIPE)
    assert spec.mount_path == "logs"  # the first share is the workspace share
    assert spec.mounts == (
        AzureFileShare("scripts", account_name="acct", share_name="scripts"),
        AzureBlobContainer("data", account_name="acct", container_name="data"),
    )
    assert spec.mounts[0].account_key == KEY  # the key reaches the mount, and nothing that is shown
    shown = [repr(spec), json.dumps(spec.to_dict()), json.dumps(to_job_json(spec, storage_account="acct"))]
    assert not [text for text in shown if KEY in text]


def test_every_kind_round_trips_through_job_json() -> None:
    mounts = (
        AzureFileShare("afs", "acct", "share-1", file_mode="0644", directory_mode="0755"),
        AzureBlobContainer("bfs", "acct", "container", mount_options="-o allow_other".replace(" ", "")),
        FileServer(
            "nfs", server="fileserver1", source_directory="/data/imagenet", mount_options="ro,vers=4.1"
        ),
        UnmanagedFileSystem("gluster", mount_command="mount -t glusterfs 10.0.0.4:/gv0"),
    )
    spec = JobSpec(**NAMES, toolkit="custommpi", command_line="true", mount_path="ws", mounts=mounts)
    doc = to_job_json(spec, storage_account="acct")
    volumes = doc["properties"]["mountVolumes"]
    assert [v["relativeMountPath"] for v in volumes["azureFileShares"]] == ["ws", "afs"]
    assert volumes["fileServers"] == [
        {
            "fileServer": {"id": "fileserver1"},
            "relativeMountPath": "nfs",
            "sourceDirectory": "/data/imagenet",
            "mountOptions": "ro,vers=4.1",
        }
    ]
    assert parse_job_json(doc, **NAMES, storage_account="acct") == spec
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_a_file_server_named_by_its_resource_id_mounts_that_server() -> None:
    doc = {
        "properties": {
            "customToolkitSettings": {"commandLine": "true"},
            "mountVolumes": {
                "fileServers": [
                    {
                        "fileServer": {"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.BatchAI/"
                                             "workspaces/w/fileServers/nfs1"},
                        "relativeMountPath": "nfs",
                        "sourceDirectory": "images",
                    }
                ]
            },
        }
    }  # fmt: skip
    (mount,) = parse(doc).mounts
    assert isinstance(mount, FileServer) and mount.remote_path == "nfs1:/data/images"
    doc["properties"]["mountVolumes"]["fileServers"][0]["mountOptions"] = ""  # as Batch AI's docs write it
    assert parse(doc).mounts == (mount,)


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"relativeMountPath": "../up"}, "azureBlobFileSystems[0].relativeMountPath", ["one directory name"]),
        ({"mountOptions": "ro;reboot"}, "azureBlobFileSystems[0].mountOptions", ["comma-separated"]),
        ({"containerName": "Bad_Name"}, "azureBlobFileSystems[0].containerName", ["container name"]),
        ({"credentials": {"accountKey": 5}}, "azureBlobFileSystems[0].credentials.accountKey", ["a string"]),
        ({"relativeMountPath": "scripts"}, "azureBlobFileSystems[0].relativeMountPath", ["no other mount"]),
        ({"blobfuseOptions": "x"}, "azureBlobFileSystems[0].blobfuseOptions", ["unknown field"]),
    ],
)
def test_a_bad_mount_names_its_json_path(change: dict[str, Any], path: str, words: list[str]) -> None:
    doc = copy.deepcopy(RECIPE)
    doc["properties"]["mountVolumes"]["azureBlobFileSystems"][0].update(change)
    with pytest.raises(BatchAIJsonError) as info:
        parse(doc)
    assert info.value.field == f"properties.mountVolumes.{path}"
    assert all(word in str(info.value) for word in words), str(info.value)
    assert KEY not in str(info.value)


def test_cluster_json_mount_volumes_are_all_mounts_of_the_cluster() -> None:
    volumes = {
        "azureFileShares": [
            {"azureFileUrl": "https://acct.file.core.windows.net/batchaishare", "relativeMountPath": "afs"}
        ],
        "unmanagedFileSystems": [
            {"mountCommand": "mount -t nfs 10.0.0.4:/export", "relativeMountPath": "ext"}
        ],
    }
    mounts = parse_mount_volumes(_Reader(None, None), volumes, "properties.nodeSetup.mountVolumes")
    assert [m.relative_mount_path for m in mounts] == ["afs", "ext"]
    spec = ClusterSpec(name="c", vm_size="STANDARD_NC6", nodes=1, mounts=mounts)
    assert ClusterSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with pytest.raises(BatchAIJsonError) as info:
        parse_mount_volumes(
            _Reader(None, None),
            {"azureFileShares": [{"relativeMountPath": "afs"}]},
            "properties.nodeSetup.mountVolumes",
        )
    assert info.value.field == "properties.nodeSetup.mountVolumes.azureFileShares[0].azureFileUrl"


def test_the_python_model_validates_and_hides_keys() -> None:
    share = AzureFileShare("afs", "acct", "data", account_key=KEY)
    assert KEY not in repr(share)
    with pytest.raises(ValidationError) as info:
        AzureFileShare("a/b", "acct", "data")
    assert info.value.field == "relative_mount_path"
    with pytest.raises(ValidationError) as info:
        FileServer("nfs", server="srv; reboot")
    assert info.value.field == "server"
    with pytest.raises(ValidationError) as info:
        JobSpec(**NAMES, python_script="x.py", mounts=[share, AzureBlobContainer("afs", "acct", "data")])
    assert info.value.field == "mounts[1].relative_mount_path"
    with pytest.raises(ValidationError) as info:
        JobSpec(**NAMES, python_script="x.py", mounts=["afs"])
    assert info.value.field == "mounts[0]"


def test_paths_resolve_against_the_mount_lists() -> None:
    job = (AzureFileShare("scripts", "acct", "scripts"),)
    cluster = (AzureBlobContainer("bfs", "acct", "data"),)

    def where(path: str, mount_path: str | None = "logs") -> Resolved | None:
        return resolve(path, share_name="ws", mount_path=mount_path, job_mounts=job, cluster_mounts=cluster)

    assert where("$AZ_BATCHAI_JOB_MOUNT_ROOT/logs/a/b") == Resolved("share", "ws", "a/b")
    assert where("${AZ_BATCHAI_JOB_MOUNT_ROOT}/scripts/x.py") == Resolved("job", "scripts", "x.py", job[0])
    assert where("$AZ_BATCHAI_JOB_MOUNT_ROOT/other/x") is None
    assert where("$AZ_BATCHAI_MOUNT_ROOT/ws/x") == Resolved("share", "ws", "x")
    assert where("$AZ_BATCHAI_MOUNT_ROOT/bfs/x/") == Resolved("cluster", "bfs", "x", cluster[0])
    assert where("$AZ_BATCHAI_MOUNT_ROOT/autoafs/logs") == Resolved("cluster", "autoafs", "logs", None)
    assert where("/abs/x") is None
    # a job that mounts nothing sees the workspace share at its job mount root
    assert resolve("$AZ_BATCHAI_JOB_MOUNT_ROOT/x", share_name="ws", mount_path=None) == Resolved(
        "share", "ws", "x"
    )


def test_logs_on_another_mount_stay_on_the_workspace_share_and_unknown_paths_are_refused() -> None:
    spec = parse(RECIPE).replace(std_out_err_path_prefix="$AZ_BATCHAI_MOUNT_ROOT/autoafs/logs")
    assert JobPaths.for_spec(spec, "ws").stdouterr == ".batchai/experiments/e/jobs/j/stdouterr"
    on_share = spec.replace(std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/logs/run1")
    assert JobPaths.for_spec(on_share, "ws").stdouterr == "run1/experiments/e/jobs/j/stdouterr"
    with pytest.raises(ValidationError) as info:
        JobPaths.for_spec(spec.replace(std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/nope"), "ws")
    assert info.value.field == "std_out_err_path_prefix"
    assert "$AZ_BATCHAI_JOB_MOUNT_ROOT/logs/" in str(info.value)


def test_the_cluster_mounts_a_job_names_are_found_in_every_field() -> None:
    spec = JobSpec(
        **NAMES,
        toolkit="custommpi",
        command_line="python $AZ_BATCHAI_MOUNT_ROOT/external/train.py --data ${AZ_BATCHAI_MOUNT_ROOT}/bfs/x",
        input_directories={"IN": "$AZ_BATCHAI_MOUNT_ROOT/ws/in"},
        std_out_err_path_prefix="$AZ_BATCHAI_MOUNT_ROOT/autoafs",
    )
    assert cluster_mounts_named(spec, share_name="ws") == {
        "external": "command_line",
        "bfs": "command_line",
        "autoafs": "std_out_err_path_prefix",
    }


TF_QUICKSTART = {  # Batch AI's TensorFlow quickstart (az CLI docs), on a cluster created with auto-storage
    "$schema": "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json",
    "properties": {
        "nodeCount": 1,
        "tensorFlowSettings": {
            "pythonScriptFilePath": "$AZ_BATCHAI_MOUNT_ROOT/autoafs/scripts/convolutional.py",
            "masterCommandLineArgs": "--log_dir=$AZ_BATCHAI_MOUNT_ROOT/autoafs/logs",
        },
        "stdOutErrPathPrefix": "$AZ_BATCHAI_MOUNT_ROOT/autoafs/logs",
    },
}


def test_the_tensorflow_quickstart_is_accepted_at_job_create_locally(ws: Workspace, caplog: Any) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    job = Job.from_batchai_json(TF_QUICKSTART, experiment=exp, cluster=cluster, name="tf")
    assert job.paths.stdouterr == ".batchai/experiments/e/jobs/tf/stdouterr"
    folder = Path(ws.backend.cluster_mount_root(cluster.spec)) / "autoafs"  # type: ignore[attr-defined]
    assert folder.is_dir()
    assert "autoafs is not a mount of cluster 'c'" in caplog.text


def test_a_path_on_no_mount_is_refused_at_job_create_naming_the_json_path(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    ws.create_cluster("c", nodes=1)
    doc = copy.deepcopy(TF_QUICKSTART)
    doc["properties"]["stdOutErrPathPrefix"] = "/mnt/logs"
    with pytest.raises(BatchAIJsonError) as info:
        Job.from_batchai_json(doc, experiment=exp, cluster="c", name="tf")
    assert info.value.field == "properties.stdOutErrPathPrefix"
    assert "std_out_err_path_prefix" not in str(info.value) and "/mnt/logs" in str(info.value)
