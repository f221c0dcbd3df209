"""Older Batch AI files load as the az CLI of 2018 loaded them: read-only and obsolete fields are passed
over with one warning naming them all, what no longer maps is refused saying what to write instead, the
``cluster`` and ``schedulingPriority`` fields of 2018-05-01 are honoured, and an error found after parsing
still names the JSON path."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import Job, Workspace
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.exceptions import BatchAIJsonError, BatchAIJsonWarning

NAMES = {"name": "j", "experiment": "e", "cluster": "gpu"}
CLUSTER_ID = (
    "/subscriptions/00000000/resourceGroups/rg/providers/Microsoft.BatchAI/workspaces/ws/clusters/gpu"
)
JOB: dict[str, Any] = {
    "properties": {
        "nodeCount": 2,
        "horovodSettings": {"pythonScriptFilePath": "$AZ_BATCHAI_JOB_MOUNT_ROOT/s/train.py"},
        "outputDirectories": [{"id": "MODEL", "pathPrefix": "$AZ_BATCHAI_JOB_MOUNT_ROOT/s"}],
    }
}


def with_props(**props: Any) -> dict[str, Any]:
    doc = copy.deepcopy(JOB)
    doc["properties"].update(props)
    return doc


def test_a_job_show_output_of_2018_loads_with_one_warning_naming_every_field_passed_over() -> None:
    doc = with_props(
        location="eastus",
        experimentName="e",
        toolType="horovod",
        provisioningState="succeeded",
        executionState="running",
        creationTime="2018-06-15T06:27:50.661000+00:00",
    )
    doc["properties"]["outputDirectories"][0].update({"type": "model", "createNew": True})
    doc.update({"id": CLUSTER_ID + "/jobs/j", "name": "j", "type": "Microsoft.BatchAI/workspaces/jobs"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = parse_job_json(doc, **NAMES)
    messages = [str(w.message) for w in caught if issubclass(w.category, BatchAIJsonWarning)]
    assert len(messages) == 1, messages
    for path in (
        "properties.location",
        "properties.toolType",
        "properties.experimentName",
        "properties.provisioningState",
        "properties.outputDirectories[0].type",
        "properties.outputDirectories[0].createNew",
        "id",
        "type",
    ):
        assert path in messages[0]
    assert spec == parse_job_json(JOB, **NAMES)  # nothing of them reached the spec


def test_a_current_file_gives_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_job_json(JOB, **NAMES)


def test_the_preview_priority_is_refused_saying_what_to_write() -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_job_json(with_props(priority=100), **NAMES)
    assert info.value.field == "properties.priority"
    assert "a field of the 2017-09-01-preview API" in str(info.value)
    assert '"schedulingPriority": "low", "normal" or "high"' in str(info.value)


@pytest.mark.parametrize(
    "cluster", [CLUSTER_ID, {"id": CLUSTER_ID}, CLUSTER_ID.replace("/workspaces/ws", "")]
)
def test_cluster_naming_the_requested_cluster_is_accepted(cluster: Any) -> None:
    assert parse_job_json(with_props(cluster=cluster), **NAMES).cluster == "gpu"


def test_cluster_naming_another_cluster_is_refused() -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_job_json(with_props(cluster=CLUSTER_ID.replace("/gpu", "/cpu")), **NAMES)
    assert info.value.field == "properties.cluster"
    assert "the id of cluster 'gpu'" in str(info.value)


@pytest.mark.parametrize(("given", "kept"), [("High", "high"), ("low", "low"), ("normal", "normal")])
def test_scheduling_priority_is_kept_and_written_back(given: str, kept: str) -> None:
    spec = parse_job_json(with_props(schedulingPriority=given), **NAMES)
    assert spec.scheduling_priority == kept
    doc = to_job_json(spec)
    assert doc["properties"].get("schedulingPriority") == (None if kept == "normal" else kept)
    assert parse_job_json(doc, **NAMES) == spec


def test_a_path_refused_at_job_creation_is_named_as_the_file_names_it(tmp_path: Path) -> None:
    ws = Workspace.local(root=tmp_path / "ws")
    ws.create_cluster("gpu", nodes=1)
    exp = ws.create_experiment("e")
    doc = with_props(stdOutErrPathPrefix="/somewhere/else/logs")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BatchAIJsonError) as info:
        Job.from_batchai_json(path, experiment=exp, cluster="gpu", name="j")
    assert info.value.field == "properties.stdOutErrPathPrefix"
    assert "properties.stdOutErrPathPrefix" in str(info.value)
    assert "std_out_err_path_prefix" not in str(info.value)


def test_an_unknown_field_among_many_points_to_the_fields_page_not_a_long_list() -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_job_json(with_props(nodeCont=2), **NAMES)
    message = str(info.value)
    assert "did you mean 'nodeCount'?" in message and "docs/job-json.md" in message
    assert len(message) < 160
    assert "schedulingPriority" in info.value.expected  # the exception still holds every known field
