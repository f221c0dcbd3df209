"""Pure parts of the Slurm backend: the state mapping, the sbatch script, the output parsers."""

from __future__ import annotations

import pytest

from batchai_sdk._models import JobState, NodeState
from batchai_sdk.backends.slurm.commands import parse_sacct, parse_sinfo, parse_squeue, sbatch_error
from batchai_sdk.backends.slurm.script import (
    SbatchRequest,
    parse_job_name,
    sbatch_script,
    slurm_job_name,
    time_limit,
)
from batchai_sdk.backends.slurm.states import job_state, node_state
from batchai_sdk.exceptions import ValidationError
from batchai_sdk.node.slurm.step import expand_hostlist, tasks_per_node


@pytest.mark.parametrize(
    ("raw", "state", "reason"),
    [
        ("PENDING", JobState.QUEUED, None),
        ("REQUEUED", JobState.QUEUED, None),
        ("CONFIGURING", JobState.RUNNING, None),
        ("RUNNING", JobState.RUNNING, None),
        ("COMPLETING", JobState.RUNNING, None),
        ("COMPLETED", JobState.SUCCEEDED, None),
        ("FAILED", JobState.FAILED, "the job's batch script exited with a non-zero code"),
        ("NODE_FAIL", JobState.FAILED, "a node of the job failed (Slurm NODE_FAIL)"),
        ("OUT_OF_MEMORY", JobState.FAILED, "out of memory: Slurm killed the job (OUT_OF_MEMORY)"),
        ("CANCELLED", JobState.TERMINATED, "cancelled in Slurm"),
        ("CANCELLED by 1000", JobState.TERMINATED, "cancelled in Slurm (by 1000)"),
        ("TIMEOUT", JobState.FAILED, "wall clock limit exceeded: Slurm ended the job (TIMEOUT)"),
        (
            "PREEMPTED",
            JobState.FAILED,
            "preempted by a higher-priority job and not requeued (Slurm PREEMPTED)",
        ),
        ("WEIRD", JobState.FAILED, "unrecognised Slurm job state 'WEIRD'"),
    ],
)
def test_job_states(raw: str, state: JobState, reason: str | None) -> None:
    assert job_state(raw) == (state, reason)


def test_job_state_details() -> None:
    assert job_state("PREEMPTED", requeue=True) == (JobState.QUEUED, None)
    assert job_state("FAILED", exit_code="2:0")[1] == "the job's batch script exited with a non-zero code (2)"
    assert (
        job_state("FAILED", exit_code="0:9")[1]
        == "the job's batch script exited with a non-zero code (0, signal 9)"
    )
    assert job_state("TIMEOUT", time_limit="00:01:00")[1] == (
        "wall clock limit of 00:01:00 exceeded: Slurm ended the job (TIMEOUT)"
    )


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("idle", NodeState.IDLE),
        ("idle~", NodeState.IDLE),
        ("allocated", NodeState.RUNNING),
        ("mixed", NodeState.RUNNING),
        ("configuring", NodeState.PREPARING),
        ("idle#", NodeState.PREPARING),
        ("completing", NodeState.LEAVING),
        ("idle%", NodeState.LEAVING),
        ("down", NodeState.UNUSABLE),
        ("down*", NodeState.UNUSABLE),
        ("idle*", NodeState.UNUSABLE),
        ("drained", NodeState.UNUSABLE),
        ("draining", NodeState.UNUSABLE),
        ("fail", NodeState.UNUSABLE),
        ("bogus", NodeState.UNUSABLE),
    ],
)
def test_node_states(raw: str, state: NodeState) -> None:
    assert node_state(raw)[0] is state
    assert (node_state(raw)[1] is not None) == (state is NodeState.UNUSABLE)


def test_job_names_round_trip() -> None:
    assert slurm_job_name("ws", "exp-1", "job_2") == "batchai.ws.exp-1.job_2"
    assert parse_job_name("batchai.ws.exp-1.job_2") == ("ws", "exp-1", "job_2")
    for other in ("interactive", "batchai.ws.exp", "batchai.ws..job", "x.ws.exp.job", "batchai.a.b.c.d"):
        assert parse_job_name(other) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(1, "0-00:01:00"), (60, "0-00:01:00"), (61, "0-00:02:00"), (3600, "0-01:00:00"), (90000, "1-01:00:00")],
)
def test_time_limit_rounds_up_to_minutes(seconds: float, text: str) -> None:
    assert time_limit(seconds) == text


def request(**changes: object) -> SbatchRequest:
    base: dict[str, object] = {
        "job_name": "batchai.ws.exp.job",
        "nodes": 2,
        "ntasks": 4,
        "stdouterr_dir": "/share/.batchai/experiments/exp/jobs/job/stdouterr",
        "workdir": "/share/.batchai/experiments/exp/jobs/job/wd",
        "launcher": (
            "python3",
            "/share/run/slurm_job.py",
            "batch",
            "/share/run/launch.json",
            "--mpi",
            "pmi2",
        ),
    }
    base.update(changes)
    return SbatchRequest(**base)  # type: ignore[arg-type]


def test_sbatch_script_exact_text() -> None:
    text = sbatch_script(
        request(
            partition="gpu",
            account="proj-1",
            constraint="v100&ib",
            gpus_per_node=4,
            max_wall_clock_seconds=5400,
            hold=True,
            comment="batchai exp/job",
            extra=("--qos=high",),
            workdir="/share/my dir/wd",
        )
    )
    assert text == (
        "#!/bin/sh\n"
        "#SBATCH --job-name=batchai.ws.exp.job\n"
        "#SBATCH --nodes=2\n"
        "#SBATCH --ntasks=4\n"
        "#SBATCH --ntasks-per-node=2\n"
        "#SBATCH --gres=gpu:4\n"
        "#SBATCH --partition=gpu\n"
        "#SBATCH --account=proj-1\n"
        "#SBATCH --constraint='v100&ib'\n"
        "#SBATCH --time=0-01:30:00\n"
        "#SBATCH --comment='batchai exp/job'\n"
        "#SBATCH --output=/share/.batchai/experiments/exp/jobs/job/stdouterr/stdout.txt\n"
        "#SBATCH --error=/share/.batchai/experiments/exp/jobs/job/stdouterr/stderr.txt\n"
        "#SBATCH --open-mode=append\n"
        "#SBATCH --chdir='/share/my dir/wd'\n"
        "#SBATCH --hold\n"
        "#SBATCH --qos=high\n"
        "\n"
        "exec python3 /share/run/slurm_job.py batch /share/run/launch.json --mpi pmi2\n"
    )


def test_sbatch_script_minimal_and_uneven() -> None:
    text = sbatch_script(request(nodes=2, ntasks=3, stdouterr_dir="/s/100%/out", launcher=("p y", "x")))
    assert "--ntasks-per-node" not in text  # 3 over 2 nodes: Slurm spreads them
    assert "#SBATCH --output=/s/100%%/out/stdout.txt\n" in text  # % is sbatch's pattern character
    assert text.endswith("\nexec 'p y' x\n")
    for absent in ("--partition", "--account", "--gres", "--time", "--hold", "--constraint"):
        assert absent not in text


@pytest.mark.parametrize(
    "changes",
    [{"nodes": 0}, {"ntasks": 1}, {"gpus_per_node": -1}, {"partition": "a\nb"}, {"extra": ("-p x",)}],
)
def test_sbatch_request_refuses_nonsense(changes: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        request(**changes)


def test_hostlists() -> None:
    assert expand_hostlist("vm") == ["vm"]
    assert expand_hostlist("n[01-03,7],login") == ["n01", "n02", "n03", "n7", "login"]
    assert expand_hostlist("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_parsers() -> None:
    jobs = parse_squeue("12|RUNNING|None|n[1-2]|1:00|batchai.ws.e.j\n13|PENDING|Resources||UNLIMITED|a|b\n")
    assert [(j.job_id, j.state, j.nodes, j.name) for j in jobs] == [
        ("12", "RUNNING", ("n1", "n2"), "batchai.ws.e.j"),
        ("13", "PENDING", (), "a|b"),
    ]
    (ended,) = parse_sacct("12|CANCELLED by 0|0:15|n1|00:01:00|batchai.ws.e.j\n")
    assert (ended.state, ended.exit_code) == ("CANCELLED by 0", "0:15")
    nodes = parse_sinfo("n1|idle|2|(null)|batch*|none\nn2|down*|8|gpu:4|batch*|Not responding\n")
    assert [(n.name, n.state, n.cpus, n.partition, n.reason) for n in nodes] == [
        ("n1", "idle", 2, "batch", "none"),
        ("n2", "down*", 8, "batch", "Not responding"),
    ]


def test_sbatch_errors_are_typed() -> None:
    err = sbatch_error(
        "sbatch: error: invalid partition specified: nosuch\n"
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
        1,
    )
    assert err.code == "partition"
    assert str(err) == (
        "sbatch: request refused: invalid partition specified: nosuch; "
        "Batch job submission failed: Invalid partition name specified"
    )
    acct = sbatch_error(
        "sbatch: error: Batch job submission failed: Invalid account or account/partition "
        "combination specified\n",
        1,
    )
    assert acct.code == "account"
    assert (
        sbatch_error("sbatch: error: Invalid generic resource (gres) specification\n", 1).code == "rejected"
    )
