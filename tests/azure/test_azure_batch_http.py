"""The Azure Batch engine through the real ``azure-batch`` 15.x and ``azure-mgmt-batch`` clients at the
HTTP level (``responses``), against fakes answering in the shapes of the official Batch REST examples:
the account and its quotas, pool add (formula, mounts, start task), multi-instance task add, task and
subtask states, task files read by range, a preempted node and the requeued task, quota refusals."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import ACCOUNT, TOKEN, FakeCredential, all_messages
from batch_helpers import batch_account, batch_workspace
from fake_batch import FakeBatchArm, FakeBatchService

from batchai_sdk import Workspace
from batchai_sdk import _layout as layout
from batchai_sdk._models import ClusterSpec, JobState, NodeState, autoscale_settings, utcnow
from batchai_sdk.backends.azure.preflight import QuotaShortError
from batchai_sdk.backends.azure_batch import pool as pools
from batchai_sdk.backends.azure_batch import task as tasks
from batchai_sdk.backends.azure_batch.scheduler import SUBMIT_GRACE
from batchai_sdk.exceptions import AzureError, AzureQuotaError, ValidationError

pytest.importorskip("azure.batch")

T4 = "Standard_NC4as_T4_v3"


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as m:
        yield m


@pytest.fixture
def env(
    mock: responses.RequestsMock, tmp_path: Path
) -> tuple[Workspace, FakeBatchArm, FakeBatchService, FakeCredential]:
    credential = FakeCredential()
    ws, arm, service, _files = batch_workspace(mock, tmp_path, credential=credential)
    return ws, arm, service, credential


def _script(tmp_path: Path) -> str:
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return str(path)


def _submit(ws: Workspace, tmp_path: Path, name: str = "j1", **kwargs: Any) -> Any:
    exp = ws.create_experiment("cifar", exist_ok=True)
    job = exp.create_job(name, cluster="nc", node_count=2, python_script=_script(tmp_path), **kwargs)
    return job.submit()


# -- the account and the pool ------------------------------------------------------------------------------
def test_pool_add_has_the_formula_mounts_start_task_and_inter_node_ssh(env: Any) -> None:
    ws, arm, service, credential = env
    ws.create_cluster(
        "nc",
        vm_size=T4,
        min_nodes=0,
        max_nodes=4,
        idle_seconds_before_scaledown=900,
        node_setup="echo set-up",
        node_setup_secrets={"SETUP_TOKEN": "setup-s3cr3t-value"},
    )
    account = next(b for m, p, b in arm.bodies if m == "PUT" and "batchAccounts" in p)
    assert account["properties"]["poolAllocationMode"] == "BatchService"
    assert account["properties"]["autoStorage"]["storageAccountId"].endswith(f"/storageAccounts/{ACCOUNT}")
    body = service.body_of("POST", r"^/pools$")
    assert body["vmSize"] == T4
    vm = body["virtualMachineConfiguration"]
    assert vm["imageReference"] == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "latest",
    }
    assert vm["nodeAgentSKUId"] == "batch.node.ubuntu 22.04"
    assert body["enableInterNodeCommunication"] is True and body["taskSlotsPerNode"] == 1
    assert (
        body["enableAutoScale"] is True and body["autoScaleEvaluationInterval"] == "PT05M00S"
    )  # azure-batch writes durations so
    assert (
        "$maxNodes = 4;" in body["autoScaleFormula"]
        and "TimeInterval_Second * 900" in body["autoScaleFormula"]
    )
    assert "targetDedicatedNodes" not in body  # the formula sets the targets
    share = body["mountConfiguration"][0]["azureFileShareConfiguration"]
    assert share == {
        "accountName": ACCOUNT,
        "azureFileUrl": f"https://{ACCOUNT}.file.core.windows.net/batchaishare",
        "accountKey": arm.storage_keys[0],
        "relativeMountPath": "batchaishare",
        "mountOptions": pools.SHARE_MOUNT_OPTIONS,
    }
    start = body["startTask"]
    assert start["waitForSuccess"] is True and "echo set-up" in start["commandLine"]
    assert start["userIdentity"] == {"autoUser": {"scope": "pool", "elevationLevel": "admin"}}
    # setupTask.secrets: the start task's environment, never its command line or the cluster's record
    assert start["environmentSettings"] == [{"name": "SETUP_TOKEN", "value": "setup-s3cr3t-value"}]
    assert "setup-s3cr3t-value" not in start["commandLine"]
    assert ws.get_cluster("nc").spec.node_setup_secret_names == ("SETUP_TOKEN",)
    assert "setup-s3cr3t-value" not in str(ws.get_cluster("nc").to_dict())
    user = body["userAccounts"][0]
    assert user["name"] == "batchai" and user["elevationLevel"] == "admin"
    assert user["linuxUserConfiguration"]["sshPrivateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    # the data plane is called with a token for Batch's own audience, never a shared key
    assert ("https://batch.core.windows.net//.default",) in credential.scopes
    assert all(h == f"Bearer {TOKEN}" for h in service.auth_headers)
    # the workspace record says which engine; the cluster is steady with no node until a job comes
    assert ws.to_dict()["engine"] == "batch" and ws.to_dict()["batch_account"] == batch_account()
    assert ws.get_cluster("nc").node_counts.idle == 0


def test_autoscale_formula_from_min_max_idle_and_spot() -> None:
    auto = autoscale_settings(1, 8, 2, 600)
    spec = ClusterSpec(name="c", vm_size=T4, nodes=2, autoscale=auto, vm_priority="lowpriority")
    assert pools.autoscale_formula(spec) == "\n".join(
        [
            "$minNodes = 1;",
            "$maxNodes = 8;",
            "$sampled = $PendingTasks.GetSamplePercent(TimeInterval_Second * 600) >= 70;",
            "$busy = $sampled ? max($PendingTasks.GetSample(TimeInterval_Second * 600)) : 0;",
            "$wanted = $sampled ? ($busy > 0 ? $maxNodes : $minNodes) : 2;",
            "$TargetLowPriorityNodes = max($minNodes, min($maxNodes, $wanted));",
            "$TargetDedicatedNodes = 0;",
            "$NodeDeallocationOption = taskcompletion;",
        ]
    )


def test_cluster_mounts_map_to_the_mount_configuration() -> None:
    mounts = [
        {
            "kind": "file_server",
            "relative_mount_path": "nfs",
            "server": "10.0.0.9",
            "export": "/data",
            "mount_options": "vers=4",
        },
        {
            "kind": "azure_blob_container",
            "relative_mount_path": "blob",
            "account_name": "data1",
            "container_name": "imgs",
        },
        {
            "kind": "azure_file_share",
            "relative_mount_path": "afs",
            "account_name": "data1",
            "share_name": "logs",
            "account_key": "k2",
        },
        {
            "kind": "unmanaged_file_system",
            "relative_mount_path": "lustre",
            "mount_command": "mount -t lustre 10.0.0.7@tcp:/fs",
        },
    ]
    config, lines = pools.mount_configuration(mounts, keys={"data1": "k1"})
    assert config[0] == {
        "nfsMountConfiguration": {
            "source": "10.0.0.9:/data",
            "relativeMountPath": "nfs",
            "mountOptions": "vers=4",
        }
    }
    assert config[1]["azureBlobFileSystemConfiguration"] == {
        "accountName": "data1",
        "containerName": "imgs",
        "accountKey": "k1",
        "relativeMountPath": "blob",
    }
    assert config[2]["azureFileShareConfiguration"]["accountKey"] == "k2"
    assert (
        config[2]["azureFileShareConfiguration"]["azureFileUrl"] == "https://data1.file.core.windows.net/logs"
    )
    assert "mount -t lustre 10.0.0.7@tcp:/fs /mnt/batch/tasks/fsmounts/lustre" in "\n".join(lines)
    with pytest.raises(Exception, match="account_key"):
        pools.mount_configuration([mounts[1]], keys={})


def test_node_states_map_to_ours(env: Any) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=3, idle_seconds_before_scaledown=None)
    service.set_node(
        "nc",
        0,
        state="starttaskfailed",
        startTaskInfo={
            "state": "completed",
            "exitCode": 1,
            "failureInfo": {
                "category": "usererror",
                "code": "FailureExitCode",
                "message": "The task exited with an exit code representing a failure",
            },
        },
    )
    service.set_node("nc", 1, state="waitingforstarttask")
    status = ws.backend.cluster_status(ws.get_cluster("nc").spec)
    ids = [n.id for n in status.nodes]
    assert status.node_states == {ids[0]: NodeState.UNUSABLE, ids[1]: NodeState.PREPARING}
    assert "start task failed" in status.reasons[ids[0]]
    counts = ws.get_cluster("nc").node_counts
    assert (counts.unusable, counts.preparing, counts.idle) == (1, 1, 1)


# -- quotas ----------------------------------------------------------------------------------------------
def test_preflight_refuses_the_account_family_quota_before_any_pool(env: Any) -> None:
    ws, _arm, service, _ = env
    with pytest.raises(QuotaShortError) as info:
        ws.create_cluster("nc", vm_size="Standard_NC64as_T4_v3", nodes=2, idle_seconds_before_scaledown=None)
    assert (
        info.value.quota == "standardNCASv3_T4Family" and info.value.limit == 64 and info.value.needed == 128
    )
    assert service.count("POST", r"^/pools$") == 0


def test_preflight_counts_the_other_pools_and_spot_cores(env: Any) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=12, idle_seconds_before_scaledown=None)  # 48 of 64 cores
    with pytest.raises(QuotaShortError) as info:
        ws.create_cluster("nc2", vm_size=T4, nodes=5, idle_seconds_before_scaledown=None)
    assert (info.value.current, info.value.needed) == (48, 20)
    with pytest.raises(QuotaShortError) as spot:
        ws.create_cluster(
            "spot", vm_size=T4, nodes=10, vm_priority="lowpriority", idle_seconds_before_scaledown=None
        )
    assert spot.value.quota == "lowPriorityCoreQuota" and spot.value.limit == 32
    assert service.count("POST", r"^/pools$") == 1


def test_the_service_refusing_a_pool_is_a_quota_error_without_secrets(env: Any, tmp_path: Path) -> None:
    ws, arm, service, _ = env
    service.inject(
        "POST", r"^/pools$", 409, "PoolQuotaReached", "The specified account has reached its pool quota."
    )
    with pytest.raises(AzureQuotaError) as info:
        ws.create_cluster("nc", vm_size=T4, nodes=1, idle_seconds_before_scaledown=None)
    assert info.value.code == "PoolQuotaReached" and "pool quota" in info.value.hint
    text = all_messages(info.value)
    assert arm.storage_keys[0] not in text and "PRIVATE KEY" not in text


# -- jobs --------------------------------------------------------------------------------------------------
def test_a_job_is_a_batch_job_with_a_multi_instance_task(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None, job_priority=50)
    job = _submit(ws, tmp_path, max_wall_clock_time=3600, max_retries=2, secrets={"HF_TOKEN": "hf-s3cret"})
    assert job.state is JobState.QUEUED
    (job_id,) = service.job_ids()
    batch_job = service.body_of("POST", r"^/jobs$")
    # created with noaction (a job with no task counts as complete), made to end with its task once it is in
    assert batch_job["poolInfo"] == {"poolId": "nc"} and batch_job["onAllTasksComplete"] == "noaction"
    assert service.body_of("PATCH", rf"^/jobs/{job_id}$") == {"onAllTasksComplete": "terminatejob"}
    assert batch_job["priority"] == 50
    task = service.body_of("POST", rf"^/jobs/{job_id}/tasks$")
    assert task["multiInstanceSettings"]["numberOfInstances"] == 2
    assert task["multiInstanceSettings"]["coordinationCommandLine"].startswith("/bin/bash -c ")
    assert "/batchai_node/__main__.py launch " in task["commandLine"]  # our launcher on the primary
    assert task["commandLine"].count("python3 -S") == 3  # no stack installed: the image's python3
    launch = ws.share.read_json(f"{layout.SHARE.run_dir('cifar', job.name)}/launch.json")
    assert launch["env"]["AZ_BATCHAI_NUM_GPUS"] == "1"  # Standard_NC4as_T4_v3: one T4
    assert launch["env"]["AZ_BATCHAI_MOUNT_ROOT"] == "/mnt/batch/tasks/fsmounts"  # $AZ_BATCH_NODE_MOUNTS_DIR
    assert launch["ssh_command"][0] == "ssh" and "plm_rsh_agent" in launch["mpirun_argv"]
    assert task["constraints"] == {"maxTaskRetryCount": 2, "maxWallClockTime": "PT01H00M00S"}
    assert task["userIdentity"] == {"username": "batchai"}  # UserIdentity.username in the spec
    settings = {e["name"]: e["value"] for e in task["environmentSettings"]}
    assert settings == {"HF_TOKEN": "hf-s3cret", "BATCHAI_SECRET_NAMES": "HF_TOKEN"}
    record = ws.share.read_json(layout.SHARE.status_record("cifar", job.name))
    assert record["batch_job_id"] == job_id
    on_share = [p.read_bytes() for p in (tmp_path / "mounts").rglob("*") if p.is_file()]
    assert on_share and not any(b"hf-s3cret" in data for data in on_share)


def test_a_jobs_own_scheduling_priority_wins_over_the_clusters_job_priority(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None, job_priority=50)
    _submit(ws, tmp_path, scheduling_priority="high")
    assert service.body_of("POST", r"^/jobs$")["priority"] == 100  # high, not the cluster's 50


def test_task_and_subtask_states_drive_the_job(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    nodes = [n["id"] for n in service.nodes["nc"]]
    service.set_task(job_id, state="preparing", nodeInfo={"nodeId": nodes[0]})
    service.subtasks[job_id] = [{"id": 1, "state": "running", "nodeInfo": {"nodeId": nodes[1]}}]
    assert job.state is JobState.RUNNING
    service.set_task(job_id, state="running", executionInfo={"startTime": "2026-11-24T10:00:00Z"})
    assert job.status.nodes == tuple(nodes)
    held = ws.backend.scheduler(ws.get_cluster("nc").spec)
    service.set_node(
        "nc", 0, state="running", recentTasks=[{"jobId": job_id, "taskId": "job", "taskState": "running"}]
    )
    assert held.assignments()[nodes[0]].job == f"cifar/{job.name}"
    assert ws.get_cluster("nc").node_counts.running == 1
    service.set_task(
        job_id,
        state="completed",
        executionInfo={"result": "success", "exitCode": 0, "endTime": "2026-11-24T10:05:00Z"},
    )
    assert (job.state, job.exit_code) == (JobState.SUCCEEDED, 0)
    assert job.status.end_time is not None and job.status.end_time.minute == 5


def test_a_failed_task_names_the_launchers_reason(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    ws.share.write_json(
        f"{layout.SHARE.run_dir('cifar', job.name)}/batch-result.json",
        {"exit_code": 3, "reason": "rank 1 on node 10.0.0.5 exited with code 3", "attempt": 0},
    )
    service.set_task(
        job_id,
        state="completed",
        executionInfo={
            "result": "failure",
            "exitCode": 3,
            "failureInfo": {
                "category": "usererror",
                "code": "FailureExitCode",
                "message": "The task exited with an exit code representing a failure",
            },
        },
    )
    status = job.status
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    assert status.failure_reason == "rank 1 on node 10.0.0.5 exited with code 3"


def test_failure_before_the_launcher_quotes_the_task_stderr_read_by_range(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    text = ("x" * 99 + "\n") * 50 + "/opt/batchai/venv/bin/python: No such file or directory\n"
    service.files[(job_id, "job", "stderr.txt")] = text.encode()
    service.set_task(job_id, state="completed", executionInfo={"result": "failure", "exitCode": 127})
    status = job.status
    assert status.state is JobState.FAILED and status.exit_code == 127
    assert (
        status.failure_reason
        == "the task's stderr.txt ends: /opt/batchai/venv/bin/python: No such file or directory"
    )
    size = len(text)
    (sent,) = service.range_headers
    assert sent == {
        "Range": f"bytes={size - 2048}-{size - 1}",
        "ocp-range": f"bytes={size - 2048}-{size - 1}",
    }


def test_task_file_ranges_as_the_spec_206_200_and_416(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=1, idle_seconds_before_scaledown=None)
    service.jobs["j"] = {"id": "j", "state": "active"}
    service.tasks["j"] = {"job": {"id": "job", "state": "running"}}
    service.files[("j", "job", "stdout.txt")] = b"0123456789"
    batch = ws.backend.service
    # Tasks_GetTaskFile: 200 with the bytes ocp-range asks for
    assert batch.read_task_file("j", "job", "stdout.txt", 3, 4) == b"3456"
    assert batch.read_task_file("j", "job", "stdout.txt", 8, 4) == b"89"
    assert batch.read_task_file("j", "job", "stdout.txt", 10, 4) == b""  # 416: past the end
    service.ranges = "206"  # a front that honours Range: 206 + Content-Range
    assert batch.read_task_file("j", "job", "stdout.txt", 3, 4) == b"3456"
    service.ranges = "whole"  # one that ignores the range: 200 and the whole file
    assert batch.read_task_file("j", "job", "stdout.txt", 3, 4) == b"3456"
    assert batch.task_file_size("j", "job", "stdout.txt") == 10
    service.ranges = "206"
    # why the SDK's own download is not used: azure-batch 15.1 refuses a 206 answer to its range
    from azure.core.exceptions import HttpResponseError

    with pytest.raises(HttpResponseError):
        b"".join(batch.client.download_task_file("j", "job", "stdout.txt", ocp_range="bytes=3-6"))


def test_a_preempted_node_requeues_the_task_and_the_job_keeps_its_identity(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster(
        "spot", vm_size=T4, nodes=2, vm_priority="lowpriority", idle_seconds_before_scaledown=None
    )
    exp = ws.create_experiment("cifar")
    job = exp.create_job("resume", cluster="spot", node_count=2, python_script=_script(tmp_path))
    job.submit()
    (job_id,) = service.job_ids()
    assert service.body_of("POST", r"^/pools$")["targetLowPriorityNodes"] == 2
    nodes = [n["id"] for n in service.nodes["spot"]]
    service.set_task(job_id, state="running", nodeInfo={"nodeId": nodes[0]})
    service.subtasks[job_id] = [{"id": 1, "state": "running", "nodeInfo": {"nodeId": nodes[1]}}]
    assert job.state is JobState.RUNNING
    # Spot capacity reclaimed: the node is preempted and the service puts the task back in the queue
    service.set_node("spot", 1, state="preempted")
    status = ws.backend.cluster_status(ws.get_cluster("spot").spec)
    assert status.node_states[nodes[1]] is NodeState.LEAVING and "preempted" in status.reasons[nodes[1]]
    service.set_task(job_id, state="active")  # requeueCount counts user requeues only: it stays 0
    assert job.state is JobState.QUEUED
    (attempt,) = job.attempts
    assert attempt["index"] == 0 and "preempted" in attempt["cause"]
    assert attempt["nodes"] == nodes
    service.set_task(job_id, state="running")
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert job.state is JobState.SUCCEEDED
    assert service.job_ids() == [job_id] and service.count("POST", r"/tasks$") == 1  # one identity
    assert len(job.attempts) == 1


def test_terminate_ends_the_batch_job(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    service.set_task(job_id, state="running")
    assert job.terminate() is JobState.TERMINATED
    assert service.jobs[job_id]["state"] == "completed"
    assert service.body_of("POST", rf"^/jobs/{job_id}/terminate$") == {
        "terminateReason": "batchai: terminated by the user"
    }
    assert job.terminate() is JobState.TERMINATED and service.count("POST", "terminate$") == 1


def test_resize_turns_the_formula_off_and_delete_is_idempotent(env: Any) -> None:
    ws, _arm, service, _ = env
    cluster = ws.create_cluster("nc", vm_size=T4, min_nodes=0, max_nodes=4)
    cluster.resize(3)
    assert service.count("POST", r"^/pools/nc/disableautoscale$") == 1
    assert service.body_of("POST", r"^/pools/nc/resize$") == {
        "targetDedicatedNodes": 3,
        "targetLowPriorityNodes": 0,
        "nodeDeallocationOption": "taskcompletion",
    }
    assert ws.get_cluster("nc").node_counts.idle == 3
    ws.get_cluster("nc").set_autoscale(min_nodes=1, max_nodes=2)
    assert "$maxNodes = 2;" in service.body_of("POST", r"^/pools/nc/enableautoscale$")["autoScaleFormula"]
    ws.delete_cluster("nc")
    assert "nc" not in service.pools
    ws.backend.delete_cluster(cluster.spec)  # gone already: no error


def test_a_refused_task_takes_its_batch_job_away_and_frees_the_name(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    service.inject(
        "POST", r"^/jobs/[^/]+/tasks$", 400, "InvalidPropertyValue", "The value provided is invalid."
    )
    with pytest.raises(AzureError, match="InvalidPropertyValue"):
        _submit(ws, tmp_path)
    assert service.job_ids() == [] and service.count("DELETE", r"^/jobs/") == 1
    job = _submit(ws, tmp_path)  # the name is free again
    assert job.state is JobState.QUEUED and len(service.job_ids()) == 1


def test_a_submit_killed_between_the_job_and_its_task_is_reconciled(env: Any, tmp_path: Path) -> None:
    """What a client killed (-9) after adding the Batch job and before its task leaves: the record's
    intent names the job; within the grace it is taken as a submit under way, then the job is removed."""
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    del service.tasks[job_id]["job"]  # as if the task had never been added
    status_rel = layout.SHARE.status_record("cifar", job.name)
    record = ws.share.read_json(status_rel)
    record["batch_submitting"] = utcnow().isoformat()
    ws.share.write_json(status_rel, record)
    assert job.state is JobState.QUEUED and job_id in service.jobs  # a submit may still be adding it
    record["batch_submitting"] = (utcnow() - timedelta(seconds=SUBMIT_GRACE + 1)).isoformat()
    ws.share.write_json(status_rel, record)
    status = job.status
    assert status.state is JobState.FAILED and "interrupted" in (status.failure_reason or "")
    assert job_id not in service.jobs


def test_priorities_and_task_states_map_in_one_place() -> None:
    assert [tasks.batch_priority(v) for v in ("high", "Normal", "low", 5000, -3, None, True)] == [
        100,
        0,
        -100,
        1000,
        -3,
        0,
        0,
    ]
    assert tasks.job_state({"state": "active", "executionInfo": {"requeueCount": 2}})[0] is JobState.QUEUED
    assert tasks.job_state({"state": "preparing"})[0] is JobState.RUNNING
    done = {"state": "completed", "executionInfo": {"result": "success", "exitCode": 0}}
    assert tasks.job_state(done) == (JobState.SUCCEEDED, 0, None)
    ended = {"state": "completed", "executionInfo": {"result": "failure", "exitCode": 137,
             "failureInfo": {"code": "TaskEnded", "message": "Task Was Ended by User Request"}}}  # fmt: skip
    assert tasks.job_state(ended)[0] is JobState.TERMINATED
    assert tasks.requeues({"executionInfo": {"requeueCount": 1, "retryCount": 2}}) == 3


def test_a_workspace_opens_only_with_the_engine_it_was_created_with(
    mock: responses.RequestsMock, tmp_path: Path
) -> None:
    ws, _arm, _service, _files = batch_workspace(mock, tmp_path)
    ws.create_experiment("first")  # the workspace's record, with its engine, comes with what it first holds
    options = {k: v for k, v in ws.backend.describe().items() if k in ("subscription_id", "location")}
    other = Workspace.azure(  # constructing makes no call (issue 23): the engine is checked at first use
        "batchaidev",
        resource_group="batchai.horovod",
        credential=FakeCredential(),
        storage_account=ACCOUNT,
        state_dir=tmp_path / "state2",
        polling_interval=0,
        ssh_source_cidr="203.0.113.7/32",
        **options,
    )
    with pytest.raises(ValidationError, match="'batch', the engine workspace 'batchaidev' was created with"):
        other.create_experiment("e")
    assert Workspace.azure("batchaidev", engine="batch", resource_group="batchai.horovod",
                           credential=FakeCredential(), storage_account=ACCOUNT, state_dir=tmp_path / "s3",
                           polling_interval=0, **options).backend.engine == "batch"  # fmt: skip


def test_the_task_files_list_stream_tail_and_download_by_range(env: Any, tmp_path: Path) -> None:
    ws, _arm, service, _ = env
    ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    service.set_task(job_id, state="running")
    service.files[(job_id, "job", "stdout.txt")] = b"a\nb\n"
    service.files[(job_id, "job", "stderr.txt")] = b""
    listed = {f.name: f.size for f in job.files(directory="batch")}
    assert listed == {"stdout.txt": 4, "stderr.txt": 0}
    lines = job.stream("stdout.txt", directory="batch", poll_interval=0.01)
    assert [next(lines), next(lines)] == ["a", "b"]
    service.files[(job_id, "job", "stdout.txt")] += b"c\n"  # the file grows while followed
    assert next(lines) == "c"
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert list(lines) == []
    ranges = [h["Range"] for h in service.range_headers]
    assert ranges == ["bytes=0-3", "bytes=4-5"]  # each poll read only what was added
    service.files[(job_id, "job", "stdout.txt")] = b"".join(b"line %d\n" % i for i in range(3000))
    assert job.tail("stdout.txt", 2, directory="batch") == ["line 2998", "line 2999"]
    size = len(service.files[(job_id, "job", "stdout.txt")])
    assert service.range_headers[-1]["Range"] == f"bytes={size - 8192}-{size - 1}"  # only the end
    path = job.download("stdout.txt", tmp_path / "out.txt", directory="batch")
    assert path.read_bytes() == service.files[(job_id, "job", "stdout.txt")]
    with pytest.raises(ValidationError, match="directory"):
        job.files(directory="nope")
