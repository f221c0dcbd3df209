"""Azure Batch as its REST spec (2025-06-01, the version azure-batch 15.x sends) says it behaves, through
the public API against the spec-validating fake (``fake_batch.py``; issue #30, "Azure Batch by the
book", findings 1-5). Each test failed on the code before that work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from batch_helpers import batch_workspace
from fake_batch import FakeBatchService
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk._models import JobState

pytest.importorskip("azure.batch")

T4 = "Standard_NC4as_T4_v3"
Env = tuple[Workspace, FakeBatchService, FakeFilesService]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        ws, _arm, service, files = batch_workspace(mock, tmp_path)
        ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
        yield ws, service, files


def _submit(ws: Workspace, tmp_path: Path, name: str = "j1") -> Any:
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    exp = ws.create_experiment("cifar", exist_ok=True)
    return exp.create_job(name, cluster="nc", node_count=2, python_script=str(script)).submit()


def _state(job: Any) -> JobState:
    return job.state  # type: ignore[no-any-return]  # read fresh each time (no narrowing)


def test_every_request_body_is_valid_against_the_spec(env: Env, tmp_path: Path) -> None:
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    service.set_task(job_id, state="running")
    job.terminate()
    ws.get_cluster("nc").resize(1)
    assert service.invalid_bodies == []
    assert len(service.checked_bodies) >= 5  # pool, job, task, job update, terminate, resize


def test_1_the_multi_instance_task_runs_as_the_pool_user(env: Env, tmp_path: Path) -> None:
    """``UserIdentity.username`` (not ``userName``): the pool's user holds the nodes' shared SSH key."""
    ws, service, _ = env
    _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    assert service.body_of("POST", rf"^/jobs/{job_id}/tasks$")["userIdentity"] == {"username": "batchai"}


def test_2_the_job_ends_with_its_task_and_not_before_it(env: Env, tmp_path: Path) -> None:
    """Created with ``noaction`` (a job with no task counts as complete), PATCHed to ``terminatejob``
    once the task is in: the job is active while its task runs and ends when the task completes."""
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    assert service.body_of("POST", r"^/jobs$")["onAllTasksComplete"] == "noaction"
    assert service.body_of("PATCH", rf"^/jobs/{job_id}$") == {"onAllTasksComplete": "terminatejob"}
    assert service.jobs[job_id]["state"] == "active" and "job" in service.tasks[job_id]
    service.set_task(job_id, state="running")
    assert _state(job) is JobState.RUNNING
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert _state(job) is JobState.SUCCEEDED
    assert service.jobs[job_id]["state"] == "completed"  # the job ended with its task


def test_3_task_files_are_read_by_range_as_the_service_answers(env: Env, tmp_path: Path) -> None:
    """``Tasks_GetTaskFile`` answers 200 with the bytes ``ocp-range`` asks for: a 4.5 MiB download is
    whole, stream reads each line once, tail reads only the end."""
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    big = bytes(range(256)) * (18 * 1024)  # 4.5 MiB
    service.files[(job_id, "job", "wd/model.bin")] = big
    lines = [f"line {i}" for i in range(2000)]
    service.files[(job_id, "job", "stdout.txt")] = ("\n".join(lines) + "\n").encode()
    path = job.download("wd/model.bin", tmp_path / "out", directory="batch")
    assert len(path.read_bytes()) == len(big) and path.read_bytes() == big  # not cut at 4 MiB
    assert list(job.stream("stdout.txt", follow=False, directory="batch")) == lines
    before = len(service.range_headers)
    assert job.tail("stdout.txt", 2, directory="batch") == ["line 1998", "line 1999"]
    asked = [h.get("ocp-range") for h in service.range_headers[before:]]
    assert asked and all(int(a.split("=")[1].split("-")[0]) > 0 for a in asked if a)  # only its end


def test_3_a_failed_task_quotes_the_end_of_its_stderr(env: Env, tmp_path: Path) -> None:
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    text = ("x" * 99 + "\n") * 50 + "/opt/batchai/venv/bin/python: No such file or directory\n"
    service.files[(job_id, "job", "stderr.txt")] = text.encode()
    service.set_task(job_id, state="completed", executionInfo={"result": "failure", "exitCode": 127})
    assert job.status.failure_reason == (
        "the task's stderr.txt ends: /opt/batchai/venv/bin/python: No such file or directory"
    )


def test_4_a_preempted_task_back_in_the_queue_records_an_attempt(env: Env, tmp_path: Path) -> None:
    """Preemption moves neither ``requeueCount`` (user requeues only) nor ``retryCount``: the task is
    ``active`` again, its node ``preempted``."""
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    nodes = [n["id"] for n in service.nodes[next(iter(service.nodes))]]
    service.set_task(job_id, state="running", nodeInfo={"nodeId": nodes[0]})
    service.subtasks[job_id] = [{"id": 1, "state": "running", "nodeInfo": {"nodeId": nodes[1]}}]
    assert _state(job) is JobState.RUNNING
    service.set_node(next(iter(service.nodes)), 1, state="preempted")
    service.set_task(job_id, state="active")  # requeueCount and retryCount stay 0
    assert _state(job) is JobState.QUEUED
    (attempt,) = job.attempts
    assert attempt["nodes"] == nodes and "preempted" in attempt["cause"] and nodes[1] in attempt["cause"]
    assert _state(job) is JobState.QUEUED and len(job.attempts) == 1  # read again: still one
    service.set_task(job_id, state="running")
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert _state(job) is JobState.SUCCEEDED and len(job.attempts) == 1


def test_5_a_submit_whose_last_share_write_fails_keeps_the_running_jobs_folder(
    env: Env, tmp_path: Path
) -> None:
    """The task exists, the service runs it: the job's folder is the service's, whatever the client saw."""
    ws, service, files = env

    def refuse(_job: str, _task: dict[str, Any]) -> None:
        files.refuse_writes = True  # every share write from now on fails

    service.on_task_added = refuse
    with pytest.raises(Exception):
        _submit(ws, tmp_path)
    files.refuse_writes = False
    (job_id,) = service.job_ids()
    assert "job" in service.tasks[job_id]
    job = ws.get_experiment("cifar").get_job("j1")
    assert _state(job) is JobState.QUEUED
    service.set_task(job_id, state="running")
    assert _state(job) is JobState.RUNNING


@pytest.mark.timeout(180)  # a stream that re-reads the same bytes never ends
def test_3_following_a_task_file_reads_each_line_once(env: Env, tmp_path: Path) -> None:
    ws, service, _ = env
    job = _submit(ws, tmp_path)
    (job_id,) = service.job_ids()
    service.set_task(job_id, state="running")
    service.files[(job_id, "job", "stdout.txt")] = b"epoch 1\n"
    lines = job.stream("stdout.txt", directory="batch", poll_interval=0.01, timeout=60)
    assert next(lines) == "epoch 1"
    service.files[(job_id, "job", "stdout.txt")] += b"epoch 2\n"
    assert next(lines) == "epoch 2"
    service.set_task(job_id, state="completed", executionInfo={"result": "success", "exitCode": 0})
    assert list(lines) == []  # drained once the job ended: nothing read twice


def test_2_a_job_whose_update_is_refused_is_taken_away_and_the_name_freed(env: Env, tmp_path: Path) -> None:
    """A job left on ``noaction`` would never end: the submit fails whole, the Batch job is deleted."""
    ws, service, _ = env
    service.inject("PATCH", r"^/jobs/[^/]+$", 500, "InternalServerError", "The server encountered an error.")
    service.inject("PATCH", r"^/jobs/[^/]+$", 500, "InternalServerError", "The server encountered an error.")
    service.inject("PATCH", r"^/jobs/[^/]+$", 500, "InternalServerError", "The server encountered an error.")
    with pytest.raises(Exception, match="InternalServerError"):
        _submit(ws, tmp_path)
    assert service.job_ids() == []
    job = _submit(ws, tmp_path)  # the name is free again
    assert _state(job) is JobState.QUEUED and len(service.job_ids()) == 1
