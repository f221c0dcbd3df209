"""The Batch AI 2018-05-01 job.json: the tutorial's file loads unchanged, round-trips, and every mistake
names its JSON path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk._models import JobSpec, Toolkit
from batchai_sdk.batchai_json import (
    SCHEMA_URL,
    format_duration,
    parse_duration,
    parse_job_json,
    to_job_json,
)
from batchai_sdk.exceptions import BatchAIJsonError, NotFoundError, ValidationError

TUTORIAL = Path(__file__).parent / "data" / "tutorial_job.json"
NAMES = {"name": "cifar_distributed", "experiment": "cifar", "cluster": "nc6cluster"}
CLUSTER_ID_BASE = "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.BatchAI/workspaces/ws"
KEY = "c2VjcmV0LXN0b3JhZ2Uta2V5LWRvLW5vdC1sb2c="


def parse(doc: Any, **kwargs: Any) -> JobSpec:
    return parse_job_json(doc, **NAMES, **kwargs)


def tutorial_doc() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TUTORIAL.read_text())
    return data


def minimal(**props: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"horovodSettings": {"pythonScriptFilePath": "train.py"}}
    base.update(props)
    return {"properties": base}


FULL_DOC: dict[str, Any] = {
    "$schema": SCHEMA_URL,
    "properties": {
        "nodeCount": 2,
        "horovodSettings": {
            "pythonScriptFilePath": "$AZ_BATCHAI_INPUT_SCRIPTS/train.py",
            "commandLineArgs": "--epochs 3 --name 'two words' --out=$AZ_BATCHAI_OUTPUT_MODEL \"a\\\"b\" ''",
            "processCount": 4,
            "pythonInterpreterPath": "/usr/bin/python3",
        },
        "stdOutErrPathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/logs",
        "mountVolumes": {
            "azureFileShares": [
                {
                    "accountName": "<AZURE_BATCHAI_STORAGE_ACCOUNT>",
                    "azureFileUrl": "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/afs",
                    "credentials": {"accountKey": "<AZURE_BATCHAI_STORAGE_KEY>"},
                    "relativeMountPath": "afs",
                    "fileMode": "0777",
                    "directoryMode": "0777",
                }
            ]
        },
        "jobPreparation": {"commandLine": "pip install horovod"},
        "containerSettings": {
            "imageSourceRegistry": {
                "image": "tensorflow/tensorflow:1.8.0-gpu",
                "serverUrl": "https://index.docker.io/v1/",
                "credentials": {"username": "me", "password": "hunter2"},
            },
            "shmSize": "2g",
        },
        "environmentVariables": [
            {"name": "NUM_NODES", "value": "2"},
            {"name": "ACCOUNT", "value": "<AZURE_BATCHAI_STORAGE_ACCOUNT>"},
            {"name": "STORAGE_KEY", "value": "<AZURE_BATCHAI_STORAGE_KEY>"},
        ],
        "secrets": [{"name": "API_TOKEN", "value": "s3cr3t"}],
        "inputDirectories": [{"id": "SCRIPTS", "path": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/scripts"}],
        "outputDirectories": [
            {"id": "MODEL", "pathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/out/", "pathSuffix": "models"},
            {"id": "LOGS", "pathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/logs"},
        ],
        "constraints": {"maxWallClockTime": "PT1H30M"},
    },
}


def test_tutorial_job_json_loads_unchanged() -> None:
    spec = parse(TUTORIAL, storage_account="mystorageaccount")
    assert spec == JobSpec(
        **NAMES,
        node_count=4,
        toolkit=Toolkit.HOROVOD,
        python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar/cifar_cnn_distributed.py",
        args=("--dir=$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar",),
        std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar",
        mount_path="myshare",
        job_preparation=(
            "apt update; apt install mpi-default-dev mpi-default-bin -y; pip install keras horovod"
        ),
        container_image="tensorflow/tensorflow:1.8.0-gpu",
    )


def test_tutorial_path_given_as_str_and_as_parsed_dict_agree() -> None:
    assert parse(str(TUTORIAL), storage_account="acct") == parse(tutorial_doc(), storage_account="acct")


def test_tutorial_as_json_text() -> None:
    text = TUTORIAL.read_text()
    assert parse(text, storage_account="acct") == parse(TUTORIAL, storage_account="acct")
    with pytest.raises(BatchAIJsonError) as info:
        parse('{"properties": ')
    assert info.value.field == "job.json" and "not valid JSON" in str(info.value)


def test_tutorial_needs_the_storage_account_for_its_placeholder() -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse(TUTORIAL)
    assert info.value.field == "properties.mountVolumes.azureFileShares[0].azureFileUrl"
    assert "<AZURE_BATCHAI_STORAGE_ACCOUNT>" in str(info.value)
    assert "--storage-account-name" in str(info.value)


def test_full_document_maps_every_supported_field() -> None:
    spec = parse(FULL_DOC, storage_account="acct", storage_key=KEY)
    assert spec.node_count == 2
    assert spec.process_count == 4
    assert spec.python_interpreter == "/usr/bin/python3"
    assert spec.args == ("--epochs", "3", "--name", "two words", "--out=$AZ_BATCHAI_OUTPUT_MODEL", 'a"b', "")
    assert spec.mount_path == "afs"
    assert spec.container_image == "tensorflow/tensorflow:1.8.0-gpu"
    assert spec.environment == {
        "NUM_NODES": "2",
        "ACCOUNT": "acct",
        "STORAGE_KEY": KEY,
        "API_TOKEN": "s3cr3t",
    }
    # the storage key reached a plain variable: it is treated as a secret from then on
    assert spec.secret_environment == ("API_TOKEN", "STORAGE_KEY")
    assert spec.input_directories == {"SCRIPTS": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/scripts"}
    assert spec.output_directories == {
        "MODEL": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/out/models",
        "LOGS": "$AZ_BATCHAI_JOB_MOUNT_ROOT/afs/logs",
    }
    assert spec.max_wall_clock_seconds == 5400
    # secrets never reach the spec's record form
    record = json.dumps(spec.to_dict())
    assert KEY not in record and "s3cr3t" not in record


@pytest.mark.parametrize(
    ("settings", "toolkit", "command_line", "process_count"),
    [
        (
            {"customMpiSettings": {"commandLine": "python a.py", "processCount": 3}},
            Toolkit.CUSTOM_MPI,
            "python a.py",
            3,
        ),
        ({"customMpiSettings": {"commandLine": "python a.py"}}, Toolkit.CUSTOM_MPI, "python a.py", None),
        ({"customToolkitSettings": {"commandLine": "bash run.sh"}}, Toolkit.CUSTOM, "bash run.sh", None),
    ],
)
def test_custom_toolkits(
    settings: dict[str, Any], toolkit: Toolkit, command_line: str, process_count: int | None
) -> None:
    spec = parse({"properties": {"nodeCount": 2, **settings}})
    assert (spec.toolkit, spec.command_line, spec.process_count, spec.python_script) == (
        toolkit,
        command_line,
        process_count,
        None,
    )
    assert parse(to_job_json(spec)) == spec


def test_round_trip_of_the_tutorial_and_the_full_document() -> None:
    for doc, kwargs in (
        (tutorial_doc(), {"storage_account": "acct"}),
        (FULL_DOC, {"storage_account": "acct", "storage_key": KEY}),
    ):
        spec = parse(doc, **kwargs)
        assert parse(to_job_json(spec)) == spec
        with_url = to_job_json(spec, storage_account="acct")
        assert with_url["properties"]["mountVolumes"]["azureFileShares"][0]["azureFileUrl"] == (
            f"https://acct.file.core.windows.net/{spec.mount_path}"
        )
        assert parse(with_url, storage_account="acct") == spec
        # what to_job_json writes survives JSON serialization
        assert parse(json.loads(json.dumps(to_job_json(spec)))) == spec


def test_to_job_json_writes_the_tutorial_shape() -> None:
    out = to_job_json(parse(TUTORIAL, storage_account="acct"))
    assert out["$schema"] == SCHEMA_URL
    assert out["properties"]["horovodSettings"] == tutorial_doc()["properties"]["horovodSettings"]
    assert out["properties"]["jobPreparation"] == tutorial_doc()["properties"]["jobPreparation"]


def test_to_job_json_redacts_secrets_on_request() -> None:
    spec = parse(FULL_DOC, storage_account="acct", storage_key=KEY)
    shown = json.dumps(to_job_json(spec, redact=True))
    assert KEY not in shown and "s3cr3t" not in shown
    assert {"name": "API_TOKEN", "value": "***"} in to_job_json(spec, redact=True)["properties"]["secrets"]
    full = to_job_json(spec)
    assert {"name": "STORAGE_KEY", "value": KEY} in full["properties"]["secrets"]


def test_to_job_json_refuses_what_the_schema_cannot_express() -> None:
    spec = JobSpec(**NAMES, toolkit=Toolkit.CUSTOM, command_line="run", process_count=2)
    with pytest.raises(ValidationError) as info:
        to_job_json(spec)
    assert info.value.field == "process_count"
    with pytest.raises(ValidationError):
        to_job_json(JobSpec(**NAMES, python_script="a.py", mount_path="a/b"))


def test_args_keep_shell_variables_unexpanded_and_expandable() -> None:
    spec = JobSpec(**NAMES, python_script="a.py", args=("--dir=$HOME/x y", "${A}", "plain"))
    line = to_job_json(spec)["properties"]["horovodSettings"]["commandLineArgs"]
    assert line == '"--dir=$HOME/x y" ${A} plain'  # double quotes: a shell still expands $HOME
    assert parse(to_job_json(spec)).args == spec.args


def test_trailing_newlines_are_not_ignored() -> None:
    spec = JobSpec(**NAMES, python_script="a.py", args=("0\n", "x\n\ny", "tab\there"))
    assert parse(to_job_json(spec)).args == spec.args
    for doc, path in (
        (
            minimal(environmentVariables=[{"name": "A\n", "value": "1"}]),
            "properties.environmentVariables[0].name",
        ),
        (
            minimal(mountVolumes={"azureFileShares": [{"relativeMountPath": "myshare\n"}]}),
            "properties.mountVolumes.azureFileShares[0].relativeMountPath",
        ),
        (minimal(inputDirectories=[{"id": "IN\n", "path": "x"}]), "properties.inputDirectories[0].id"),
    ):
        with pytest.raises(BatchAIJsonError) as info:
            parse(doc)
        assert info.value.field == path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("PT1H30M", 5400),
        ("PT90S", 90),
        ("PT0.5S", 0.5),
        ("P1D", 86400),
        ("P1W", 604800),
        ("P1DT2H", 93600),
        ("1.00:00:00", 86400),
        ("01:30:00", 5400),
        ("7.00:00:00", 604800),
        ("00:00:10.5", 10.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    "text", ["PT1H\n", "", "P", "PT", "P1DT", "1h", "P1Y", "P1M", "PT0S", "00:60:00", "24:00:00", "-PT1H"]
)
def test_bad_durations_name_the_path(text: str) -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse(minimal(constraints={"maxWallClockTime": text}))
    assert info.value.field == "properties.constraints.maxWallClockTime"


def test_format_duration_is_readable_and_exact() -> None:
    assert format_duration(5400) == "PT1H30M"
    assert format_duration(86400 * 7) == "PT168H"
    assert format_duration(0.1) == "PT0.1S"
    for value in (1e-7, 3600.1, 1234567.891, 2.5e-12):
        assert parse_duration(format_duration(value)) == value


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def _delete(doc: dict[str, Any], dotted: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    del node[last]
    return doc


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        # unknown fields: the path, the known keys, a suggestion
        (
            _set(tutorial_doc(), "properties.horovodSettings.pythonScriptPath", "x.py"),
            "properties.horovodSettings.pythonScriptPath",
            ["unknown field", "pythonScriptFilePath", "commandLineArgs, processCount"],
        ),
        (
            _set(tutorial_doc(), "properties.nodecount", 4),
            "properties.nodecount",
            ["unknown field", "nodeCount"],
        ),
        (
            _set(tutorial_doc(), "locaton", "eastus"),
            "locaton",
            ["unknown field", "$schema, batchaiSdk, properties"],
        ),
        (
            _set(tutorial_doc(), "properties.mountVolumes.azureFileShares.0.mountOptions", "x"),
            "properties.mountVolumes.azureFileShares[0].mountOptions",
            ["unknown field", "relativeMountPath"],
        ),
        # wrong types
        (
            _set(tutorial_doc(), "properties.nodeCount", "4"),
            "properties.nodeCount",
            ["'4'", "an integer >= 1"],
        ),
        (_set(tutorial_doc(), "properties.nodeCount", True), "properties.nodeCount", ["true", "an integer"]),
        (_set(tutorial_doc(), "properties.nodeCount", 0), "properties.nodeCount", ["an integer >= 1"]),
        (_set(tutorial_doc(), "properties.nodeCount", 2.0), "properties.nodeCount", ["an integer"]),
        (
            _set(tutorial_doc(), "properties.horovodSettings.commandLineArgs", ["--dir", "x"]),
            "properties.horovodSettings.commandLineArgs",
            ["a list", "a string"],
        ),
        (
            _set(tutorial_doc(), "properties.mountVolumes.azureFileShares", {"relativeMountPath": "x"}),
            "properties.mountVolumes.azureFileShares",
            ["an object", "a list"],
        ),
        (_set(tutorial_doc(), "properties", []), "properties", ["a list", "an object"]),
        (
            _set(tutorial_doc(), "properties.environmentVariables", [{"name": "A", "value": 1}]),
            "properties.environmentVariables[0].value",
            ["a string"],
        ),
        (
            _set(tutorial_doc(), "properties.environmentVariables", [{"name": "1A", "value": "x"}]),
            "properties.environmentVariables[0].name",
            ["variable name"],
        ),
        (
            _set(tutorial_doc(), "properties.horovodSettings.commandLineArgs", "--dir 'unclosed"),
            "properties.horovodSettings.commandLineArgs",
            ["No closing quotation"],
        ),
        (
            _set(tutorial_doc(), "properties.mountVolumes.azureFileShares.0.relativeMountPath", "../up"),
            "properties.mountVolumes.azureFileShares[0].relativeMountPath",
            ["one directory name"],
        ),
        (
            _set(tutorial_doc(), "properties.mountVolumes.azureFileShares.0.azureFileUrl", "ftp://x/y"),
            "properties.mountVolumes.azureFileShares[0].azureFileUrl",
            ["file.core.windows.net"],
        ),
        # missing fields
        (_delete(tutorial_doc(), "properties"), "properties", ["missing"]),
        (
            _delete(tutorial_doc(), "properties.horovodSettings.pythonScriptFilePath"),
            "properties.horovodSettings.pythonScriptFilePath",
            ["missing"],
        ),
        (
            _delete(tutorial_doc(), "properties.horovodSettings"),
            "properties.horovodSettings",
            ["exactly one of"],
        ),
        (
            _set(tutorial_doc(), "properties.customToolkitSettings", {"commandLine": "x"}),
            "properties",
            ["horovodSettings, customToolkitSettings", "exactly one of"],
        ),
        (
            _delete(tutorial_doc(), "properties.containerSettings.imageSourceRegistry.image"),
            "properties.containerSettings.imageSourceRegistry.image",
            ["missing"],
        ),
        # not supported
        (
            _set(tutorial_doc(), "properties.cluster", {"id": "/subs/x"}),
            "properties.cluster.id",
            ["a cluster resource id"],
        ),
        (
            _set(tutorial_doc(), "properties.cluster", f"{CLUSTER_ID_BASE}/clusters/other"),
            "properties.cluster",
            ["the id of cluster 'nc6cluster'"],
        ),
        (
            _set(tutorial_doc(), "properties.schedulingPriority", "urgent"),
            "properties.schedulingPriority",
            ["'low', 'normal' or 'high'"],
        ),
        (
            _set(tutorial_doc(), "properties.priority", 100),
            "properties.priority",
            ["a field of the 2017-09-01-preview API", '"schedulingPriority"'],
        ),
        (
            _set(tutorial_doc(), "properties.pyTorchSettings", {"pythonScriptFilePath": "a.py"}),
            "properties",
            ["horovodSettings, pyTorchSettings", "exactly one of"],
        ),
        (
            _set(
                tutorial_doc(),
                "properties.mountVolumes.azureBlobFileSystems",
                [{"accountName": "acct", "relativeMountPath": "data"}],
            ),
            "properties.mountVolumes.azureBlobFileSystems[0].containerName",
            ["missing"],
        ),
        (
            _set(
                tutorial_doc(),
                "properties.mountVolumes.azureFileShares",
                [{"relativeMountPath": "a"}, {"relativeMountPath": "b"}],
            ),
            "properties.mountVolumes.azureFileShares[1].azureFileUrl",
            ["missing", "file.core.windows.net"],
        ),
        (
            _set(
                tutorial_doc(),
                "properties.mountVolumes.unmanagedFileSystems",
                [{"mountCommand": "mount -t nfs 10.0.0.4:/x", "relativeMountPath": "myshare"}],
            ),
            "properties.mountVolumes.unmanagedFileSystems[0].relativeMountPath",
            ["no other mount uses", "azureFileShares[0]"],
        ),
        (
            _set(
                tutorial_doc(),
                "properties.mountVolumes.fileServers",
                [
                    {
                        "fileServer": {"id": "/subscriptions/s/fileservers/nfs"},
                        "relativeMountPath": "n",
                        "mountOptions": "rw; rm -rf /",
                    }
                ],
            ),
            "properties.mountVolumes.fileServers[0].mountOptions",
            ["comma-separated mount options"],
        ),
        (
            _set(
                tutorial_doc(),
                "properties.secrets",
                [{"name": "T", "valueSecretReference": {"sourceVault": {"id": "v"}, "secretUrl": "u"}}],
            ),
            "properties.secrets[0].valueSecretReference",
            ["not supported", "Key Vault"],
        ),
        # duplicates
        (
            _set(
                tutorial_doc(),
                "properties.inputDirectories",
                [{"id": "A", "path": "x"}, {"id": "A", "path": "y"}],
            ),
            "properties.inputDirectories[1].id",
            ["not used by another"],
        ),
        (
            _set(
                _set(tutorial_doc(), "properties.environmentVariables", [{"name": "A", "value": "1"}]),
                "properties.secrets",
                [{"name": "A", "value": "2"}],
            ),
            "properties.secrets[0].name",
            ["not already used"],
        ),
    ],
)
def test_each_mistake_names_its_json_path(doc: dict[str, Any], path: str, words: list[str]) -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse(doc, storage_account="acct")
    assert info.value.field == path
    message = str(info.value)
    assert path in message
    for word in words:
        assert word in message


def test_storage_key_placeholder_outside_secret_places_is_refused() -> None:
    doc = minimal(jobPreparation={"commandLine": "mount -o key=<AZURE_BATCHAI_STORAGE_KEY>"})
    with pytest.raises(BatchAIJsonError) as info:
        parse(doc, storage_key=KEY)
    assert info.value.field == "properties.jobPreparation.commandLine"
    assert "job records" in str(info.value)
    assert KEY not in str(info.value)


def test_storage_key_placeholder_needs_the_key() -> None:
    doc = minimal(secrets=[{"name": "K", "value": "<AZURE_BATCHAI_STORAGE_KEY>"}])
    with pytest.raises(BatchAIJsonError) as info:
        parse(doc)
    assert info.value.field == "properties.secrets[0].value"
    assert parse(doc, storage_key=KEY).environment == {"K": KEY}


def test_secret_values_never_appear_in_errors() -> None:
    doc = minimal(secrets=[{"name": "K", "value": ["s3cr3t-in-a-list"]}])
    with pytest.raises(BatchAIJsonError) as info:
        parse(doc)
    assert "s3cr3t" not in str(info.value)
    assert info.value.value is None


def test_missing_file_and_invalid_json(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        parse(tmp_path / "nope.json")
    bad = tmp_path / "job.json"
    bad.write_text('{"properties": {"nodeCount": 4,}}')
    with pytest.raises(BatchAIJsonError) as info:
        parse(bad)
    assert info.value.field == str(bad)
    assert "line 1" in str(info.value)
    bad.write_text('{"properties": {"nodeCount": 4, "nodeCount": 2}}')
    with pytest.raises(BatchAIJsonError, match="'nodeCount' appears twice"):
        parse(bad)
    with pytest.raises(BatchAIJsonError, match="cannot read"):
        parse(tmp_path)


def test_job_names_come_from_the_caller_and_are_validated() -> None:
    with pytest.raises(ValidationError) as info:
        parse_job_json(tutorial_doc(), name="bad name", experiment="cifar", cluster="c", storage_account="a")
    assert info.value.field == "job name"
