from __future__ import annotations

import pytest

from batchai_sdk import BatchAIError, JobSpec, JobState, NodeCounts, ValidationError
from batchai_sdk._models import ClusterSpec, validate_name


@pytest.mark.parametrize("bad", ["", "a" * 65, "has space", "dot.name", "slash/name", "ünï", None, 3])
def test_invalid_names_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        validate_name(bad, "job name")
    assert err.value.field == "job name"
    assert "job name" in str(err.value)
    assert isinstance(err.value, BatchAIError)


@pytest.mark.parametrize("good", ["a", "cifar_distributed", "nc6-cluster", "A" * 64])
def test_valid_names(good: str) -> None:
    assert validate_name(good) == good


def test_job_spec_validation_names_each_field() -> None:
    base = dict(name="j", experiment="e", cluster="c", python_script="train.py")
    cases = [
        ({"node_count": 0}, "node_count"),
        ({"node_count": True}, "node_count"),
        ({"process_count": 0}, "process_count"),
        ({"args": "--dir x"}, "args"),
        ({"args": ("--n", 3)}, "args[1]"),
        ({"python_script": None}, "python_script"),
        ({"environment": {"BAD-NAME": "x"}}, "environment"),
        ({"environment": {"N": 1}}, "environment.N"),
        ({"output_directories": {"bad id": "$AZ_BATCHAI_JOB_MOUNT_ROOT"}}, "output_directories"),
        ({"max_wall_clock_seconds": 0}, "max_wall_clock_seconds"),
        ({"cluster": "no such/cluster"}, "cluster name"),
    ]
    for change, field in cases:
        with pytest.raises(ValidationError) as err:
            JobSpec(**{**base, **change})  # type: ignore[arg-type]
        assert err.value.field == field, change


def test_job_spec_round_trips_and_redacts_secrets() -> None:
    spec = JobSpec(
        name="j",
        experiment="e",
        cluster="c",
        python_script="t.py",
        args=("--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT"),
        environment={"A": "1", "TOKEN": "s3cret"},
        secret_environment=("TOKEN",),
    )
    assert JobSpec.from_dict(spec.to_dict(redact=False)) == spec
    redacted = spec.to_dict()
    assert redacted["environment"] == {"A": "1", "TOKEN": "***"}
    assert "s3cret" not in repr(redacted)


def test_cluster_spec_checks_size_and_priority() -> None:
    with pytest.raises(ValidationError, match="nodes"):
        ClusterSpec(name="c", vm_size="Standard_NC6", nodes=-1)
    with pytest.raises(ValidationError, match="vm_priority"):
        ClusterSpec(name="c", vm_size="Standard_NC6", nodes=1, vm_priority="cheap")  # type: ignore[arg-type]
    spec = ClusterSpec(name="c", vm_size="Standard_NC6", nodes=2, vm_priority="LowPriority")  # type: ignore[arg-type]
    assert spec.vm_priority.value == "lowpriority"
    assert ClusterSpec.from_dict(spec.to_dict()) == spec


def test_job_state_mapping_is_in_one_place() -> None:
    assert JobState.from_raw(None) is JobState.QUEUED
    assert JobState.from_raw("Running") is JobState.RUNNING
    assert JobState.from_raw("completed") is JobState.SUCCEEDED
    assert JobState.from_raw("preparing") is JobState.RUNNING
    assert [s.value for s in JobState if s.ended] == ["succeeded", "failed", "terminated"]
    assert str(JobState.FAILED) == "failed"


def test_node_counts_as_batchai_prints_them() -> None:
    counts = NodeCounts(idle=1, running=2, preparing=0, leaving=0, unusable=1)
    assert counts.total == 4
    assert counts.to_batchai() == {
        "idleNodeCount": 1,
        "leavingNodeCount": 0,
        "preparingNodeCount": 0,
        "runningNodeCount": 2,
        "unusableNodeCount": 1,
    }


@pytest.mark.parametrize("bad", ["job\n", "job\n\n", "\njob"])
def test_names_with_a_trailing_newline_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError):
        validate_name(bad)
    with pytest.raises(ValidationError):
        JobSpec(
            name="j", experiment="e", cluster="c", python_script="t.py", environment={bad.strip() + "\n": "x"}
        )


def test_a_job_that_stopped_reporting_reads_as_failed() -> None:
    from datetime import datetime, timedelta, timezone

    from batchai_sdk import JobStatus

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    running = {
        "state": "running",
        "creation_time": t0.isoformat(),
        "heartbeat": t0.isoformat(),
        "wrapper_host": "node0",
    }
    fresh = JobStatus.from_record(running, timeout=60, now=t0 + timedelta(seconds=59))
    assert fresh.state is JobState.RUNNING and not fresh.lost
    lost = JobStatus.from_record(running, timeout=60, now=t0 + timedelta(seconds=61))
    assert lost.state is JobState.FAILED and lost.lost
    assert "node0" in (lost.failure_reason or "") and "wrapper" not in (lost.failure_reason or "")
    new_keys = {**running, "reporter": {"host": "head1", "pid": 42}}
    del new_keys["wrapper_host"]
    lost = JobStatus.from_record(new_keys, timeout=60, now=t0 + timedelta(seconds=61))
    assert (lost.reporter_host, lost.reporter_pid) == ("head1", 42) and "head1 (pid 42)" in str(
        lost.failure_reason
    )
    never = JobStatus.from_record(
        {"state": "queued", "creation_time": t0.isoformat()}, timeout=60, now=t0 + timedelta(minutes=5)
    )
    assert never.lost and "never started" in (never.failure_reason or "")
    done = {"state": "succeeded", "heartbeat": t0.isoformat()}
    assert JobStatus.from_record(done, timeout=60, now=t0 + timedelta(days=1)).state is JobState.SUCCEEDED


def test_setup_secrets_are_named_in_the_record_and_never_shown() -> None:
    spec = ClusterSpec(name="c", vm_size="x", nodes=1, node_setup_secrets={"TOKEN": "s3cr3t-setup"})
    assert spec.to_dict()["node_setup_secret_names"] == ["TOKEN"]
    assert ClusterSpec.from_dict(spec.to_dict()).node_setup_secret_names == ("TOKEN",)
    assert "s3cr3t-setup" not in repr(spec) + str(spec.to_dict())
    for bad, field_name in (
        ({"node_setup_secrets": {"TOKEN": b"s3cr3t-bytes"}}, "node_setup_secrets.TOKEN"),
        ({"node_setup_secrets": {"1x": "v"}}, "node_setup_secrets"),
        ({"node_setup_secret_names": "AB"}, "node_setup_secret_names"),
    ):
        with pytest.raises(ValidationError) as info:
            ClusterSpec(name="c", vm_size="x", nodes=1, **bad)  # type: ignore[arg-type]
        assert info.value.field == field_name and "s3cr3t" not in str(info.value)
