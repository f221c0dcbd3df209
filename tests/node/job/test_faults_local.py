"""Fault drills (``job.inject_fault``) on the local backend with real processes: each kind does to the job
what it says, the job recovers where the product recovers it, and ``job.goodput`` says what it cost."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import FaultInjectionRefusedError, JobState, ValidationError, Workspace
from batchai_sdk.cli import main
from batchai_sdk.cluster import Cluster
from batchai_sdk.job import Job

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

# Steps of 0.2 s; rank 0 logs each step and saves a checkpoint every 5 (atomically), and on SIGTERM;
# a later attempt resumes after the checkpoint's step.
STEPPER = """
import json, os, signal, sys, time
from batchai_sdk import log_metric
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
ckpt = os.path.join(sys.argv[1], "ckpt.json")
steps = int(sys.argv[2])
def save(step):
    if rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)
done = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        done = json.load(f)["step"]
def on_term(signum, frame):
    save(done)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
print(f"rank {rank} attempt {os.environ['AZ_BATCHAI_JOB_RESTART_COUNT']} from step {done + 1}", flush=True)
for step in range(done + 1, steps + 1):
    time.sleep(0.2)
    done = step
    if rank == 0:
        log_metric(step, loss=1.0 / step)
    if step % 5 == 0:
        save(step)
"""


def stepper_job(
    ws: Workspace, script: Script, tmp_path: Path, name: str, steps: int = 40, **options: object
) -> Job:
    cluster = ws.create_cluster(
        "c", vm_size="Standard_D2_v2", nodes=3, allow_fault_injection=True, exist_ok=True
    )
    path = script("stepper.py", STEPPER)
    out = tmp_path / name
    out.mkdir()
    exp = ws.create_experiment("e", exist_ok=True)
    command = f"{sys.executable} {path} {out} {steps}"
    return exp.create_job(name, cluster=cluster, node_count=2, command_line=command, **options).submit()


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def test_drills_are_refused_unless_the_cluster_allows_them(ws: Workspace, tmp_path: Path) -> None:
    cluster: Cluster = ws.create_cluster("plain", vm_size="Standard_D2_v2", nodes=1)
    job = ws.create_experiment("e").create_job("j", cluster=cluster, command_line="sleep 30").submit()
    with pytest.raises(FaultInjectionRefusedError, match="allow_fault_injection=True"):
        job.inject_fault("kill_rank", rank=0)
    assert job.state in (JobState.QUEUED, JobState.RUNNING)
    job.terminate()
    drills = ws.create_cluster("drills", vm_size="Standard_D2_v2", nodes=1, allow_fault_injection=True)
    assert ws.get_cluster("drills").spec.allow_fault_injection  # kept in the cluster's record
    other = ws.create_experiment("e", exist_ok=True).create_job("k", cluster=drills, command_line="true")
    with pytest.raises(ValidationError, match="kind"):
        other.submit().inject_fault("unplug")
    with pytest.raises(ValidationError, match="rank"):
        other.inject_fault("kill_rank")


def test_lose_node_ends_the_attempt_as_a_lost_node_and_the_job_resumes_from_its_checkpoint(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job = stepper_job(ws, script, tmp_path, "lose", max_retries=1)
    fault = job.inject_fault("lose_node", at_step=12, timeout=120)
    assert fault["kind"] == "lose_node" and fault["attempt"] == 0
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    first = job.attempts[0]
    assert first["cause"] == "node_lost", first
    assert f"node {fault['node']} stopped answering (fault drill: lose_node)" in first["reason"]
    resumed = int(job.tail("stdout.txt", 5)[0].rsplit(" ", 1)[1])
    assert resumed > 10  # from a checkpoint (every 5 steps, or rank 0's on SIGTERM), not from scratch
    g = job.goodput
    assert g.steps == 40 and g.steps_missing == 0 and g.attempts == 2
    assert g.goodput is not None and 0.0 < g.goodput < 1.0
    (loss,) = g.lost
    assert loss.cause == "node_lost" and loss.fault_time == fault["time"]
    assert loss.detection_s is not None and loss.restart_s is not None
    assert loss.steps_repeated <= 5  # at most the steps since the last checkpoint, run again
    print(f"\nlose_node: {g.summary()}; {loss}")
    assert job.to_dict()["goodput"]["lost"][0]["cause"] == "node_lost"  # job show
    assert "goodput " + f"{100 * g.goodput:.1f}%" in job._repr_html_()  # the notebook view


def test_evict_requeues_without_a_retry_and_the_job_resumes(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job = stepper_job(ws, script, tmp_path, "evict", max_retries=0)
    job.inject_fault("evict", at_step=8, grace_seconds=10, timeout=120)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.attempts[0]["cause"] == "evicted"
    g = job.goodput
    assert g.steps == 40 and g.steps_missing == 0 and g.lost[0].steps_repeated == 0  # saved on SIGTERM
    print(f"\nevict: {g.summary()}")


def test_kill_rank_kills_that_rank_and_a_listed_exit_code_requeues_the_job(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job = stepper_job(ws, script, tmp_path, "kill", max_retries=1, retry_on_exit_codes=[137])
    job.inject_fault("kill_rank", rank=1, at_step=6, timeout=120)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    first = job.attempts[0]
    assert first["exit_code"] == 137 and "rank 1" in first["reason"], first
    g = job.goodput
    assert g.steps == 40 and [loss.cause for loss in g.lost] == ["exit"]  # a fault, though a listed exit


def stepper_pids(out: Path) -> dict[int, int]:
    """rank → pid of the job's stepper processes (their argv names the job's own folder)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = dict(e.split(b"=", 1) for e in (entry / "environ").read_bytes().split(b"\0") if b"=" in e)
        except OSError:
            continue
        if str(out).encode() in argv and any(a.endswith(b"stepper.py") for a in argv):
            found[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(entry.name)
    return found


@pytest.mark.parametrize("kind", ["hang_rank", "stop_node"])
def test_hang_rank_and_stop_node_stop_the_second_nodes_rank_without_ending_it(
    ws: Workspace, script: Script, tmp_path: Path, kind: str
) -> None:
    name = kind.replace("_", "")
    job = stepper_job(ws, script, tmp_path, name, steps=400)
    options: dict[str, object] = {"rank": 1} if kind == "hang_rank" else {}
    fault = job.inject_fault(kind, at_step=3, timeout=120, **options)
    node = fault["node"] or job.status.nodes[-1]
    log = f"execution-{node}.log"
    wait_for(
        lambda: any(f"fault drill {kind}" in line for line in job.tail(log, 50)), timeout=30, what="the drill"
    )
    pids = stepper_pids(tmp_path / name)
    assert sorted(pids) == [0, 1]
    wait_for(lambda: stopped(pids[1]), timeout=5, what="rank 1 to stop")
    assert not stopped(pids[0])  # the first node's rank runs on
    assert job.state is JobState.RUNNING
    job.terminate()


def test_the_cli_drill_runs_a_job_through_faults_and_prints_each_recovery_and_the_goodput(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], script: Script
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    out = tmp_path / "cli"
    out.mkdir()
    command = f"{sys.executable} {script('stepper.py', STEPPER)} {out} 40"
    assert main(["cluster", "create", "-n", "plain", "--target", "2"]) == 0
    assert main(["job", "create", "-c", "plain", "-n", "j", "--command-line", "sleep 30"]) == 0
    capsys.readouterr()
    assert main(["job", "inject-fault", "-n", "j", "--kind", "evict"]) != 0
    assert "allow_fault_injection=True" in capsys.readouterr().err
    assert main(["job", "terminate", "-n", "j", "--yes"]) == 0
    assert main(["cluster", "create", "-n", "c", "--target", "3", "--allow-fault-injection"]) == 0
    capsys.readouterr()
    code = main(["job", "drill", "-c", "c", "-n", "d", "--command-line", command, "--nodes", "2",
                 "--max-retries", "2", "--faults", "2", "--kinds", "lose_node,evict", "--every-steps", "8",
                 "--seed", "1", "-o", "json"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert printed.count("resumed at step") == 2, printed
    report = json.loads(printed[printed.index("{") :])
    assert len(report["faults"]) == 2
    assert all(f["recovery_s"] is not None for f in report["faults"]), report
    assert report["goodput"]["steps"] == 40 and report["goodput"]["stepsMissing"] == 0
    assert len(report["goodput"]["lost"]) == 2 and report["state"] == "succeeded"
    print("\n" + printed[: printed.index("{")])


ELASTIC = """
import os, time
from batchai_sdk import log_metric
rank = int(os.environ["RANK"])
print(f"rank {rank} start {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", flush=True)
for step in range(1, 26):
    time.sleep(0.2)
    if rank == 0:
        log_metric(step, loss=1.0 / step)
"""


def test_a_killed_pytorch_rank_restarts_in_place_with_max_restarts_and_the_job_is_not_requeued(
    ws: Workspace, script: Script
) -> None:
    cluster = ws.create_cluster("c", vm_size="Standard_D2_v2", nodes=2, allow_fault_injection=True)
    job = ws.create_experiment("e").create_job(
        "elastic", cluster=cluster, node_count=2, toolkit="pytorch", python_script=str(script("el.py", ELASTIC)),
        toolkit_settings={"max_restarts": 2},
    ).submit()  # fmt: skip
    fault = job.inject_fault("kill_rank", rank=1, at_step=5, timeout=120)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert len(job.attempts) == 1 and job.attempts[0]["cause"] == "exit"  # one attempt: no requeue
    assert sorted(job.tail("stdout.txt", 10)) == ["rank 0 start 0", "rank 1 start 0", "rank 1 start 1"]
    node = job.status.nodes[-1]
    log = job.tail(f"execution-{node}.log", 30)
    assert any("rank 1 exited with signal 9; restarted in place (1 of 2)" in line for line in log), log
    assert fault["rank"] == 1
    with pytest.raises(ValidationError, match="max_restarts"):
        ws.get_experiment("e").create_job("bad", cluster=cluster, toolkit="pytorch", python_script="x.py",
                                          toolkit_settings={"max_restarts": -1})  # fmt: skip
