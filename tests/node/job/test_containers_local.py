"""containerSettings on the local backend, with a stand-in engine first on the nodes' PATH: the image's full
name, one pull per machine before the ranks start, the ranks' `run`, a failed pull's reason. The same
whether or not a real docker or podman is installed: the stand-ins shadow both."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _procs import wait_for
from _stand_ins import engine_calls, stand_in_engine
from batchai_sdk import Job, JobState, Workspace
from batchai_sdk.node.job.containers import qualify_image

Script = Callable[[str, str], Path]


@pytest.mark.parametrize(
    ("image", "full"),
    [
        ("tensorflow/tensorflow:1.8.0-gpu", "docker.io/tensorflow/tensorflow:1.8.0-gpu"),
        ("ubuntu", "docker.io/library/ubuntu"),
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("ubuntu@sha256:" + "a" * 64, "docker.io/library/ubuntu@sha256:" + "a" * 64),
        ("docker.io/library/ubuntu", "docker.io/library/ubuntu"),
        ("myregistry.azurecr.io/team/train:3", "myregistry.azurecr.io/team/train:3"),
        ("localhost/train", "localhost/train"),
        ("registry:5000/train@sha256:" + "b" * 64, "registry:5000/train@sha256:" + "b" * 64),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
    ],
)
def test_a_short_image_name_is_docker_hubs(image: str, full: str) -> None:
    assert qualify_image(image) == full


@pytest.fixture
def engine_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Put stand-in engines first on PATH (the local backend's nodes get the client's PATH); returns the
    calls log."""

    def put(**options: str | None) -> Path:
        log = tmp_path / "engine.log"
        folder = stand_in_engine(tmp_path / "engine-bin", log, **options)  # type: ignore[arg-type]
        venv_bin = str(Path(sys.executable).parent)
        monkeypatch.setenv("PATH", f"{folder}:{venv_bin}:{os.environ['PATH']}")
        return log

    return put


def workspace(tmp_path: Path) -> Workspace:
    return Workspace.local(root=tmp_path / "ws", allow_host_changes=True)  # may pull and run images


def submit_one_node_job(tmp_path: Path, script: Script, source: str, image: str, **options: Any) -> Job:
    """A one-node job of ``source`` with ``image`` on a fresh local workspace, submitted."""
    ws = workspace(tmp_path)
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = ws.create_experiment("e").create_job(
        "one", cluster=cluster, python_script=str(script("t.py", source)), container_image=image, **options
    )
    return job.submit()


def test_the_image_is_pulled_once_per_machine_by_its_full_name_before_the_ranks_run(
    tmp_path: Path, script: Script, engine_path: Callable[..., Path]
) -> None:
    log = engine_path(engine="podman")
    ws = workspace(tmp_path)
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job(
        "img",
        cluster=cluster,
        node_count=2,
        python_script=str(script("t.py", "import os; print('task', os.environ['AZ_BATCHAI_TASK_INDEX'])")),
        container_image="tensorflow/tensorflow:1.8.0-gpu",
    )
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(job.tail("stdout.txt")) == ["task 0", "task 1"]
    calls = engine_calls(log)
    # the 2 local nodes are one machine: one pull, by the full name, before any rank's run
    assert calls[0] == ["podman", "pull", "docker.io/tensorflow/tensorflow:1.8.0-gpu"]
    assert [c for c in calls if c[1] == "pull"] == calls[:1]
    runs = engine_calls(log, "run")
    assert len(runs) == 2 and len(calls) == 3
    for run in runs:
        image_at = run.index("docker.io/tensorflow/tensorflow:1.8.0-gpu")
        assert run[1:3] == ["run", "--rm"] and run[image_at + 1 :][-1].endswith("t.py")
        assert run[run.index("--network") + 1] == "host"
    logs = [f.name for f in job.files() if f.name.startswith("execution-")]
    execution = "\n".join(line for name in logs for line in job.tail(name, 50))
    assert "pulling image docker.io/tensorflow/tensorflow:1.8.0-gpu with podman" in execution


def test_a_failed_pull_fails_the_job_naming_the_image_and_the_engines_message(
    tmp_path: Path, script: Script, engine_path: Callable[..., Path]
) -> None:
    log = engine_path(
        engine="podman", pull_error="reading manifest 9.9 in docker.io/library/nope: manifest unknown"
    )
    job = submit_one_node_job(tmp_path, script, "print('the rank ran')", "nope:9.9")
    assert job.wait(timeout=120) is JobState.FAILED
    assert job.status.failure_reason == (
        "could not pull image docker.io/library/nope:9.9: Error: initializing source "
        "docker://docker.io/library/nope:9.9: reading manifest 9.9 in docker.io/library/nope: manifest unknown"
        " (engine: podman)"
    )
    assert engine_calls(log) == [["podman", "pull", "docker.io/library/nope:9.9"]]  # no rank started
    assert "stdout.txt" not in [f.name for f in job.files()]  # the script never started


def test_without_an_engine_that_answers_the_ranks_run_on_the_host_and_say_so(
    tmp_path: Path, script: Script, engine_path: Callable[..., Path]
) -> None:
    log = engine_path(engine=None)  # docker and podman clients whose engines do not answer
    job = submit_one_node_job(tmp_path, script, "print('on the host')", "tensorflow/tensorflow:1.8.0-gpu")
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert job.tail("stdout.txt") == ["on the host"]
    warning = [line for line in job.tail("stderr.txt", 20) if "tensorflow/tensorflow:1.8.0-gpu" in line]
    assert warning and "no container runtime" in warning[0] and "runs on the host" in warning[0]
    assert engine_calls(log) == []  # nothing pulled, nothing run


def test_a_pull_that_hangs_fails_the_job_at_the_jobs_pull_timeout(
    tmp_path: Path, script: Script, engine_path: Callable[..., Path]
) -> None:
    engine_path(engine="podman", pull_seconds="600")
    timeout = {"BATCHAI_PULL_TIMEOUT": "2"}
    job = submit_one_node_job(tmp_path, script, "print('the rank ran')", "slow:1", environment=timeout)
    assert job.wait(timeout=60) is JobState.FAILED
    assert job.status.failure_reason == (
        "could not pull image docker.io/library/slow:1: no answer in 2 s "
        "(set BATCHAI_PULL_TIMEOUT in the job's environment for longer) (engine: podman)"
    )
    cluster = job.workspace.get_cluster("c")
    wait_for(lambda: cluster.node_counts.idle == 1, timeout=15, what="the node to be free again")
    ours = str(tmp_path).encode()  # this test's engine child: its PATH holds the stand-in's folder
    sleepers = [
        p
        for p in Path("/proc").glob("[0-9]*/cmdline")
        if _reads(p) == b"sleep\x00600\x00" and ours in _reads(p.with_name("environ"))
    ]
    assert sleepers == []  # the engine's child went with it


def _reads(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
