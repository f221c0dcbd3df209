"""Toolkit fidelity on the local backend, with real mpirun: a 2-node custom-toolkit job that starts its own
``mpirun --hostfile $AZ_BATCHAI_MPI_HOST_FILE`` runs 2 ranks, command lines run under bash (``source``,
``[[ ]]``), and ``AZ_BATCHAI_JOB_TEMP_DIR`` is set (tests/ssh/test_ssh_toolkit_fidelity.py: the same on
sshd nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import Job, JobState, Workspace

pytestmark = pytest.mark.mpi

# Microsoft's batch-scoring and Horovod recipes start their own mpirun on the hostfile Batch AI gave them.
CUSTOM_JOB = {
    "properties": {
        "nodeCount": 2,
        "jobPreparation": {"commandLine": "source /etc/os-release && [[ -n $ID ]] && echo prepared on $ID"},
        "customToolkitSettings": {
            "commandLine": "source /dev/null && [[ -d $AZ_BATCHAI_JOB_TEMP_DIR ]] && "
            "mpirun --hostfile $AZ_BATCHAI_MPI_HOST_FILE -bind-to none "
            "sh -c 'echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE'"
        },
    }
}


def custom_job_ranks(job: Job) -> list[str]:
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    return sorted(line for line in job.stream("stdout.txt", follow=False) if line.startswith("rank"))


def test_a_custom_job_s_own_mpirun_runs_on_every_node_of_the_job(tmp_path: Path) -> None:
    ws = Workspace.local(root=tmp_path / "ws")
    cluster = ws.create_cluster("c", nodes=2)
    exp = ws.create_experiment("e")
    job = Job.from_batchai_json(CUSTOM_JOB, experiment=exp, cluster=cluster, name="own-mpirun")
    job.submit()
    assert custom_job_ranks(job) == ["rank 0 of 2", "rank 1 of 2"]  # was 1 of 1: the hostfile held one node
    prep = [f.name for f in job.files() if f.name.startswith("stdout-job_prep-")]
    assert prep and job.tail(prep[0]) and job.tail(prep[0])[-1].startswith("prepared on ")


def test_scheduling_priority_orders_the_cluster_s_queue(tmp_path: Path) -> None:
    """One node, held by a job until a gate file exists; a low then a high priority job queue behind it:
    once the node is free, the high one starts first although it came second."""
    ws = Workspace.local(root=tmp_path / "ws")
    cluster = ws.create_cluster("one", nodes=1)
    exp = ws.create_experiment("e")
    gate = tmp_path / "gate"

    def job(name: str, command: str, priority: str) -> Job:
        doc = {
            "properties": {"schedulingPriority": priority, "customToolkitSettings": {"commandLine": command}}
        }
        made = Job.from_batchai_json(doc, experiment=exp, cluster=cluster, name=name)
        made.submit()
        return made

    blocker = job("blocker", f"while [ ! -e {gate} ]; do sleep 0.1; done", "normal")
    wait_for(lambda: blocker.state is JobState.RUNNING, 60, "the blocker to run")
    low = job("low", "date +%s.%N", "low")
    high = job("high", "date +%s.%N", "high")
    assert low.state is JobState.QUEUED and high.state is JobState.QUEUED
    gate.touch()
    for j in (blocker, low, high):
        assert j.wait(timeout=120) is JobState.SUCCEEDED, j.status.failure_reason
    started = {j.name: float(j.tail("stdout.txt")[-1]) for j in (low, high)}
    assert started["high"] < started["low"]
