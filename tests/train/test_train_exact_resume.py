"""Bit-exact resume of the shipped torch module (issue 34): a 2-rank DDP job on the local backend stopped
by K faults at random moments (evictions: SIGTERM, the ranks checkpoint mid-epoch; lost nodes: the ranks
killed, the job resumes from the last checkpoint) logs the very same loss series, to the last bit, as a run
of the same seed that was never stopped: data order, dropout, augmentation, optimizer, schedule restored."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator

import pytest

from _procs import wait_for
from batchai_sdk import JobState, NotFoundError, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.job import Job

pytestmark = [pytest.mark.train, pytest.mark.mpi, pytest.mark.timeout(1800)]
pytest.importorskip("torch")
pytest.importorskip("sklearn")

# 16 steps per rank and epoch, 64 in all: a step takes 0.1 s on an idle core (seconds on a loaded one), so
# even on an idle machine an attempt trains long enough for the next of 5 faults to find it running
ARGS = ["--dataset", "digits", "--epochs", "4", "--batch-size", "8", "--max-train-samples", "256",
        "--max-test-samples", "64", "--seed", "7"]  # fmt: skip
COMPARED = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Cluster]]:
    ws = Workspace.local(root=tmp_path_factory.mktemp("exact") / "ws")
    cluster = ws.create_cluster("c", nodes=2, allow_fault_injection=True)
    yield ws, cluster
    with contextlib.suppress(Exception):
        for job in ws.get_experiment("e").list_jobs():
            if not job.state.ended:
                job.terminate()
    ws.close()


def run(ws: Workspace, cluster: Cluster, name: str, **options: object) -> Job:
    exp = ws.create_experiment("e", exist_ok=True)
    return exp.create_job(
        name, cluster=cluster, node_count=2, toolkit="pytorch", python_script="batchai_sdk.train.cifar10_torch",
        args=["--dir", f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{name}", *ARGS], **options,
    ).submit()  # fmt: skip


def training(job: Job) -> bool:
    """Whether the attempt running now said what it trains (its stdout.txt is gone between attempts)."""
    try:
        return any("steps of 8 per rank" in line for line in job.tail("stdout.txt", 40))
    except NotFoundError:
        return False


def series(ws: Workspace, name: str) -> list[tuple[object, ...]]:
    lines = ws.share.read_text(f"{name}/metrics.jsonl").splitlines()
    return [tuple(json.loads(line)[k] for k in COMPARED) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def reference(lab: tuple[Workspace, Cluster]) -> list[tuple[object, ...]]:
    ws, cluster = lab
    job = run(ws, cluster, "clean")
    assert job.wait(timeout=900) is JobState.SUCCEEDED, job.status.failure_reason
    return series(ws, "clean")


@pytest.mark.parametrize("faults", [1, 5])
def test_the_loss_series_after_faults_equals_the_fault_free_runs(
    lab: tuple[Workspace, Cluster], reference: list[tuple[object, ...]], faults: int
) -> None:
    ws, cluster = lab
    rng = random.Random(faults)
    name = f"faults{faults}"
    job = run(ws, cluster, name, max_retries=faults)
    kinds = ["evict" if i % 2 == 0 else "lose_node" for i in range(faults)]
    for i, kind in enumerate(kinds):
        # a random moment of the attempt's training: after rank 0 said what it trains, or after an epoch
        wait_for(
            lambda: job.state.ended or training(job),
            timeout=300, what=f"attempt {i + 1} to train",
        )  # fmt: skip
        if job.state.ended:
            break
        time.sleep(rng.uniform(0.0, 1.5))
        job.inject_fault(kind, grace_seconds=60, timeout=300)
        wait_for(
            lambda n=i: len(job.attempts) > n or job.state.ended, timeout=300, what=f"fault {i + 1}'s end"
        )
    assert job.wait(timeout=900) is JobState.SUCCEEDED, job.status.failure_reason
    causes = [a["cause"] for a in job.attempts]
    print(f"\n{faults} fault(s): attempts ended {causes}; {job.goodput.summary()}")
    mid_epoch = [a for a in job.attempts if a["cause"] == "evicted"]
    assert len(job.attempts) == faults + 1 and mid_epoch, causes
    got = series(ws, name)
    assert got == reference  # every epoch's loss, accuracy and validation scores, bit for bit
