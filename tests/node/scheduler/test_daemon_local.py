"""The cluster scheduler with real processes on the local backend: every job runs once, no two jobs
share a node, a name runs once, and nothing of a job outlives its reported end."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from _procs import pid_alive, wait_for
from batchai_sdk import AlreadyExistsError, JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.node.job import procs

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

# A custom-toolkit job that records which nodes the scheduler gave it and when it ran there. Custom runs
# one task per node, so each node writes its own file, exclusively: a second run of a job fails loudly.
RECORD = (
    'python3 -c "import json,os,time; s=time.time(); time.sleep({secs}); '
    "t=os.environ['AZ_BATCHAI_TASK_INDEX']; "
    "open(os.path.join('{out}', '{name}-'+t+'.json'),'x').write(json.dumps("
    "{{'job':'{name}','nodes':os.environ['BATCHAI_JOB_NODES'].split(','),'start':s,'end':time.time()}}))\""
)


def job_runs(out: Path) -> list[dict[str, Any]]:
    """One record per job, sorted by name: its nodes, from its first node's start to its last node's end."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(out.glob("*.json")):
        record = json.loads(p.read_text())
        by_job.setdefault(record["job"], []).append(record)
    runs = []
    for name, records in sorted(by_job.items()):
        assert len(records) == len(records[0]["nodes"]), f"{name}: {len(records)} task files"
        assert all(r["nodes"] == records[0]["nodes"] for r in records)
        start, end = min(r["start"] for r in records), max(r["end"] for r in records)
        runs.append({"job": name, "nodes": records[0]["nodes"], "start": start, "end": end})
    return runs


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_fifty_jobs_on_two_nodes_run_once_each_and_never_share_a_node(
    ws: Workspace, tmp_path: Path, round_: int
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    exp = ws.create_experiment("q")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    jobs = []
    for i in range(50):
        nodes = 2 if i % 5 == 0 else 1
        cmd = RECORD.format(secs=0.05, out=out, name=f"j{i:02d}")
        jobs.append(exp.create_job(f"j{i:02d}", cluster=cluster, node_count=nodes, command_line=cmd).submit())
    for job in jobs:
        assert job.wait(timeout=180) is JobState.SUCCEEDED, job.status.failure_reason
    runs = job_runs(out)
    assert sorted(r["job"] for r in runs) == [f"j{i:02d}" for i in range(50)]  # each ran, once
    for job, run in zip(jobs, runs, strict=True):
        assert len(run["nodes"]) == job.spec.node_count == len(set(run["nodes"]))
        assert sorted(run["nodes"]) == sorted(job.status.nodes)
    by_node: dict[str, list[tuple[float, float, str]]] = {}
    for run in runs:
        for node in run["nodes"]:
            by_node.setdefault(node, []).append((run["start"], run["end"], run["job"]))
    for node, spans in by_node.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert end <= start, f"{a} and {b} overlapped on {node}"
    # first come, first served: a 2-node job is never overtaken by later 1-node jobs without wall clocks
    starts = {r["job"]: r["start"] for r in runs}
    for i in range(0, 50, 5):
        later = [starts[f"j{k:02d}"] for k in range(i + 1, 50)]
        assert all(s >= starts[f"j{i:02d}"] for s in later)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), what="nodes to be free")


def _submit_same_name(root: str, runs: str, barrier: Any, result: list[str]) -> None:
    ws = Workspace.local(root=root)
    exp = ws.get_experiment("e")
    job = exp.create_job("same", cluster="c", command_line=f"echo ran >> {runs}")
    barrier.wait()
    try:
        job.submit()
        result.append("ok")
    except AlreadyExistsError:
        result.append("exists")


def test_four_processes_submitting_one_name_run_it_once(ws: Workspace, tmp_path: Path) -> None:
    runs_file = tmp_path / "runs"
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    ctx = multiprocessing.get_context("spawn")
    for _round in range(10):
        with ctx.Manager() as manager:
            result = manager.list()
            barrier = manager.Barrier(4)
            workers = [
                ctx.Process(
                    target=_submit_same_name,
                    args=(str(ws.backend.root), str(runs_file), barrier, result),  # type: ignore[attr-defined]
                )
                for _ in range(4)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join(60)
            outcome = sorted(result)
        assert outcome == ["exists", "exists", "exists", "ok"], outcome
        job = exp.get_job("same")
        assert job.wait(timeout=60) is JobState.SUCCEEDED
        runs = runs_file.read_text().splitlines()
        assert runs == ["ran"], runs
        job.delete()
        runs_file.unlink()
    assert cluster.node_counts == NodeCounts(idle=1)


SLEEPER = """
    import os, sys, time
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    print("up", flush=True)
    time.sleep(300)
"""


def _job_pids(job_dir: Path) -> tuple[int, str]:
    """The sleeping script's pid, and the job's tag read from that process's environment."""
    pid = int((job_dir / "pid").read_text())
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    tag = next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"BATCHAI_JOB_TAG="))
    return pid, tag


def _start_sleeper(ws: Workspace, script: Script, tmp_path: Path, name: str) -> tuple[object, int, str]:
    exp = ws.get_experiment("e") if ws.list_experiments() else ws.create_experiment("e")
    cluster = (
        ws.get_cluster("c") if ws.list_clusters() else ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    )
    path = script("sleepy.py", SLEEPER)
    job = exp.create_job(
        name, cluster=cluster, python_script=str(path), args=[str(tmp_path / "pid")]
    ).submit()
    wait_for(lambda: (tmp_path / "pid").exists() and job.tail() == ["up"], what="the job to run")
    pid, tag = _job_pids(tmp_path)
    return job, pid, tag


def _launcher_pid(tag: str) -> int:
    for pid in procs.tagged_pids(tag):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"launch" in cmdline:
            return pid
    raise AssertionError("no launcher found")


def test_killing_the_launcher_ends_every_process_of_the_job_before_its_nodes_are_reused(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job, pid, tag = _start_sleeper(ws, script, tmp_path, "lost")
    os.kill(_launcher_pid(tag), signal.SIGKILL)
    assert job.wait(timeout=30) is JobState.FAILED  # type: ignore[attr-defined]
    assert "launcher was killed by signal 9" in (job.status.failure_reason or "")  # type: ignore[attr-defined]
    assert not pid_alive(pid) and procs.tagged_pids(tag) == []  # nothing of it is left
    assert ws.get_cluster("c").node_counts == NodeCounts(idle=1)
    (tmp_path / "pid").unlink()
    follow = ws.get_experiment("e").create_job("next", cluster="c", command_line="echo next").submit()
    assert follow.wait(timeout=60) is JobState.SUCCEEDED


def test_killing_a_rank_wrapper_stops_its_script_and_names_that_rank(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job, pid, tag = _start_sleeper(ws, script, tmp_path, "shim")
    shim = int(Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[1])  # the script's parent
    os.kill(shim, signal.SIGKILL)
    assert job.wait(timeout=60) is JobState.FAILED  # type: ignore[attr-defined]
    reason = job.status.failure_reason or ""  # type: ignore[attr-defined]
    assert "rank 0 on node" in reason and "without reporting an exit" in reason, reason
    assert not pid_alive(pid) and procs.tagged_pids(tag) == []


def test_terminate_ends_every_process_and_frees_the_node(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job, pid, tag = _start_sleeper(ws, script, tmp_path, "stopme")
    assert job.terminate(timeout=60) is JobState.TERMINATED  # type: ignore[attr-defined]
    assert not pid_alive(pid) and procs.tagged_pids(tag) == []
    assert ws.get_cluster("c").node_counts == NodeCounts(idle=1)


def test_a_killed_scheduler_is_restarted_and_picks_its_running_job_up_again(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job, pid, _ = _start_sleeper(ws, script, tmp_path, "adopted")
    state = ws.backend.root / "tmp" / "scheduler" / "c"  # type: ignore[attr-defined]
    sched = []
    for p in os.listdir("/proc"):
        try:  # a process that ended since the listing is not the scheduler
            if p.isdigit() and Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[3:5] == [
                b"scheduler",
                bytes(state),
            ]:
                sched.append(p)
        except OSError:
            continue
    assert len(sched) == 1
    os.kill(int(sched[0]), signal.SIGKILL)
    queued = ws.get_experiment("e").create_job("after", cluster="c", command_line="echo after").submit()
    assert job.state is JobState.RUNNING and pid_alive(pid)  # type: ignore[attr-defined]
    assert job.terminate(timeout=60) is JobState.TERMINATED  # type: ignore[attr-defined]
    assert not pid_alive(pid)
    assert queued.wait(timeout=60) is JobState.SUCCEEDED


def test_resize_fails_queued_jobs_that_no_longer_fit_and_nonsense_is_refused(ws: Workspace) -> None:
    from batchai_sdk import ValidationError

    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    hold = exp.create_job("hold", cluster=cluster, node_count=2, command_line="sleep 60").submit()
    wide = exp.create_job("wide", cluster=cluster, node_count=2, command_line="true").submit()
    narrow = exp.create_job("narrow", cluster=cluster, node_count=1, command_line="true").submit()
    wait_for(lambda: hold.state is JobState.RUNNING, what="the first job to run")
    cluster.resize(1)
    assert wide.wait(timeout=30) is JobState.FAILED
    assert "resized to 1 node(s)" in (wide.status.failure_reason or "")
    assert narrow.state is JobState.QUEUED  # it still fits: it waits for the node
    hold.terminate()
    assert narrow.wait(timeout=60) is JobState.SUCCEEDED
    for bad in (
        {"max_wall_clock_time": float("inf")},
        {"max_wall_clock_time": -1},
        {"process_count": 0},
        {"mount_path": "../x"},
    ):
        with pytest.raises(ValidationError):
            exp.create_job("bad", cluster=cluster, command_line="true", **bad)  # type: ignore[arg-type]
