"""hang_timeout, max_retries, retry_on_exit_codes: JobSpec validation and records, create_job, and the
job.json ``batchaiSdk`` extension."""

from __future__ import annotations

import json
from typing import Any

import pytest

from batchai_sdk import Workspace
from batchai_sdk._models import TRAINING_MODULE_HANG_TIMEOUT, JobSpec
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.exceptions import BatchAIJsonError, ValidationError


def _spec(**kw: Any) -> JobSpec:
    base: dict[str, Any] = {"name": "j", "experiment": "e", "cluster": "c", "python_script": "train.py"}
    return JobSpec(**{**base, **kw})


def test_defaults_off_for_user_scripts_on_for_shipped_modules() -> None:
    user = _spec()
    assert (user.hang_timeout, user.watchdog_seconds, user.max_retries, user.retry_on_exit_codes) == (
        None,
        None,
        0,
        (),
    )
    shipped = _spec(python_script="batchai_sdk.train.cifar10")
    assert shipped.hang_timeout == TRAINING_MODULE_HANG_TIMEOUT == 1800.0
    assert shipped.watchdog_seconds == 1800.0
    off = _spec(python_script="batchai_sdk.train.cifar10", hang_timeout=0)
    assert off.hang_timeout == 0.0 and off.watchdog_seconds is None
    # A file that happens to be named like the module is the user's script.
    assert _spec(python_script="batchai_sdk/train/cifar10.py").hang_timeout is None
    assert _spec(hang_timeout=90).hang_timeout == 90.0


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("hang_timeout", -1, "hang_timeout"),
        ("hang_timeout", True, "hang_timeout"),
        ("hang_timeout", "30", "hang_timeout"),
        ("hang_timeout", float("inf"), "hang_timeout"),
        ("hang_timeout", float("nan"), "hang_timeout"),
        ("max_retries", -1, "max_retries"),
        ("max_retries", 1.5, "max_retries"),
        ("max_retries", False, "max_retries"),
        ("retry_on_exit_codes", "137", "retry_on_exit_codes"),
        ("retry_on_exit_codes", 137, "retry_on_exit_codes"),
        ("retry_on_exit_codes", (1, 0), "retry_on_exit_codes[1]"),
        ("retry_on_exit_codes", (256,), "retry_on_exit_codes[0]"),
        ("retry_on_exit_codes", (True,), "retry_on_exit_codes[0]"),
    ],
)
def test_invalid_values_name_the_field(field: str, value: Any, named: str) -> None:
    with pytest.raises(ValidationError) as info:
        _spec(**{field: value})
    assert info.value.field == named


def test_record_round_trip() -> None:
    spec = _spec(hang_timeout=120, max_retries=2, retry_on_exit_codes=[75, 143])
    assert spec.retry_on_exit_codes == (75, 143)
    data = json.loads(json.dumps(spec.to_dict()))
    assert (data["hang_timeout"], data["max_retries"], data["retry_on_exit_codes"]) == (120.0, 2, [75, 143])
    assert JobSpec.from_dict(data) == spec
    # Records written before these fields existed read with the defaults.
    old = {k: v for k, v in _spec(python_script="batchai_sdk.train.cifar10").to_dict().items()
           if k not in ("hang_timeout", "max_retries", "retry_on_exit_codes")}  # fmt: skip
    assert JobSpec.from_dict(old).hang_timeout == 1800.0


def test_create_job_takes_the_fields(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("j", cluster=cluster, python_script="batchai_sdk.train.cifar10",
                         max_retries=3, retry_on_exit_codes=[75])  # fmt: skip
    assert (job.spec.hang_timeout, job.spec.max_retries, job.spec.retry_on_exit_codes) == (1800.0, 3, (75,))
    with pytest.raises(ValidationError) as info:
        exp.create_job("k", cluster=cluster, python_script="batchai_sdk.train.cifar10", hang_timeout=-5)
    assert info.value.field == "hang_timeout"


DOC = {"properties": {"nodeCount": 2, "horovodSettings": {"pythonScriptFilePath": "train.py"}}}


def test_job_json_extension_parses_and_round_trips() -> None:
    doc = {**DOC, "batchaiSdk": {"hangTimeoutSeconds": 600, "maxRetries": 2, "retryOnExitCodes": [75]}}
    spec = parse_job_json(doc, name="j", experiment="e", cluster="c")
    assert (spec.hang_timeout, spec.max_retries, spec.retry_on_exit_codes) == (600.0, 2, (75,))
    written = to_job_json(spec)
    assert written["batchaiSdk"] == {"hangTimeoutSeconds": 600, "maxRetries": 2, "retryOnExitCodes": [75]}
    assert parse_job_json(written, name="j", experiment="e", cluster="c") == spec


def test_job_json_without_changes_has_no_extension() -> None:
    for script in ("train.py", "batchai_sdk.train.cifar10"):
        doc = {"properties": {"nodeCount": 1, "horovodSettings": {"pythonScriptFilePath": script}}}
        spec = parse_job_json(doc, name="j", experiment="e", cluster="c")
        assert "batchaiSdk" not in to_job_json(spec)
    # Turning the shipped module's watchdog off is a change, and survives the round trip.
    off = _spec(python_script="batchai_sdk.train.cifar10", hang_timeout=0)
    assert to_job_json(off)["batchaiSdk"] == {"hangTimeoutSeconds": 0}
    assert parse_job_json(to_job_json(off), name="j", experiment="e", cluster="c") == off
    assert to_job_json(_spec(hang_timeout=2.5))["batchaiSdk"] == {"hangTimeoutSeconds": 2.5}


@pytest.mark.parametrize(
    ("extension", "path"),
    [
        ({"hangTimeoutSeconds": "10m"}, "batchaiSdk.hangTimeoutSeconds"),
        ({"hangTimeoutSeconds": -1}, "batchaiSdk.hangTimeoutSeconds"),
        ({"maxRetries": 1.0}, "batchaiSdk.maxRetries"),
        ({"maxRetries": -2}, "batchaiSdk.maxRetries"),
        ({"retryOnExitCodes": 75}, "batchaiSdk.retryOnExitCodes"),
        ({"retryOnExitCodes": [75, 0]}, "batchaiSdk.retryOnExitCodes[1]"),
        ({"maxRetry": 1}, "batchaiSdk.maxRetry"),
        ([], "batchaiSdk"),
    ],
)
def test_job_json_extension_errors_name_the_path(extension: Any, path: str) -> None:
    with pytest.raises(BatchAIJsonError) as info:
        parse_job_json({**DOC, "batchaiSdk": extension}, name="j", experiment="e", cluster="c")
    assert info.value.field == path
