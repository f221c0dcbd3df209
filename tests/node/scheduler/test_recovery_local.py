"""The scheduler around its own failures, with real processes on the local backend: clients racing a new
cluster's first scheduler, kill -9 of the scheduler in its launch window, a lost ``sched.db`` under
running jobs. Each test gates on files and processes, never on sleeps."""

from __future__ import annotations

import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from _procs import pid_alive, wait_for
from _scheduler_procs import kill_scheduler_at_launch, scheduler_pid
from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.mpi


def _sched_state(ws: Workspace, cluster: str) -> Path:
    return ws.backend.root / "tmp" / "scheduler" / cluster  # type: ignore[attr-defined,no-any-return]


# -- R1: only accepted requests are jobs ------------------------------------------------------------------
def _submit_to_new_clusters(root: str, worker: int, runs: str, barrier: Any, result: Any) -> None:
    ws = Workspace.local(root=root)
    exp = ws.get_experiment("e")
    for k in range(5):
        name = f"w{worker}-c{k}"
        job = exp.create_job(name, cluster=f"c{k}", command_line=f"echo ran >> {runs}/{name}")
        barrier.wait()
        try:
            job.submit()
            result.append((name, "ok"))
        except Exception as exc:  # the test reports what each client saw
            result.append((name, f"{type(exc).__name__}: {exc}"))


def test_clients_racing_a_new_clusters_first_scheduler_are_all_accepted_and_run_once(
    ws: Workspace, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    exp = ws.create_experiment("e")
    for k in range(5):
        ws.create_cluster(f"c{k}", vm_size="Standard_NC6", nodes=1)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        result = manager.list()
        barrier = manager.Barrier(4)
        root = str(ws.backend.root)  # type: ignore[attr-defined]
        workers = [
            ctx.Process(target=_submit_to_new_clusters, args=(root, w, str(runs), barrier, result))
            for w in range(4)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        outcome = dict(result)
    names = sorted(f"w{w}-c{k}" for w in range(4) for k in range(5))
    assert sorted(outcome) == names
    refused = {n: o for n, o in outcome.items() if o != "ok"}
    assert not refused, refused
    for name in names:
        job = exp.get_job(name)
        assert job.wait(timeout=120) is JobState.SUCCEEDED, (name, job.status.failure_reason)
        assert (runs / name).read_text().splitlines() == ["ran"], name  # ran once, its folder kept
        assert job.files()  # its folder and logs are still there


# -- R2: intent before action --------------------------------------------------------------------------


def test_kill_9_of_the_scheduler_in_its_launch_window_never_starts_a_job_twice(
    ws: Workspace, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=4)  # launches come as fast as submits
    state = _sched_state(ws, "c")
    jobs = []
    killed = 0
    for i in range(20):
        # the job holds its node until the kill: a scheduler with nothing to do exits after IDLE_EXIT (2 s),
        # and a killer thread starved that long under load would find none to kill
        gate = runs / f"go-k{i}"
        cmd = f"echo ran-$$ >> {runs}/k{i}; while [ ! -e {gate} ]; do sleep 0.05; done; echo out-k{i}; exit 5"
        hits: list[bool] = []
        killer = threading.Thread(target=lambda h=hits: h.append(kill_scheduler_at_launch(state)))
        killer.start()  # the launch may happen inside the submit's own request
        jobs.append(exp.create_job(f"k{i}", cluster=cluster, command_line=cmd).submit())
        killer.join()
        gate.touch()
        killed += sum(hits)
    ws.backend.scheduler(cluster.spec).ensure_running()  # a new scheduler must reconcile the last launch
    for i, job in enumerate(jobs):
        assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
        lines = (runs / f"k{i}").read_text().splitlines()
        assert len(lines) == 1, (f"k{i}", lines)  # one launcher, one run
        assert job.exit_code == 5, (f"k{i}", job.status.failure_reason)  # the one run's outcome
        assert job.tail("stdout.txt") == [f"out-k{i}"]
    assert killed == 20  # every launch window was hit


# -- R3: fencing after a lost database -------------------------------------------------------------------
HOLD = (
    "python3 -c \"import json,os,time; n=os.environ['BATCHAI_JOB_NODES']; "
    "open('{out}/{name}.json','w').write(json.dumps({{'node':n,'pid':os.getpid()}})); time.sleep(300)\""
)
CHECK = (  # a process of an earlier job still alive on this job's node (a zombie is dead) is a shared node
    "python3 -c \"import json,os,glob; n=os.environ['BATCHAI_JOB_NODES']\n"
    "for p in glob.glob('{out}/*.json'):\n"
    " r=json.load(open(p))\n"
    " if r['node']==n:\n"
    "  try: z=open('/proc/%d/stat' % r['pid']).read().rsplit(') ',1)[1].split()[0]\n"
    "  except OSError: z='gone'\n"
    "  if z not in ('gone','Z'): open('{out}/SHARED-{name}','w').write(p)\n"
    "open('{out}/ran-{name}','w')\""
)


def test_a_lost_database_under_running_jobs_never_shares_a_node(ws: Workspace, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    holders = [
        exp.create_job(n, cluster=cluster, command_line=HOLD.format(out=out, name=n)).submit()
        for n in ("a", "b")
    ]
    wait_for(lambda: all((out / f"{n}.json").exists() for n in ("a", "b")), 60, "both jobs to run")
    wait_for(lambda: all((out / f"{n}.json").read_text() for n in ("a", "b")), 10, "their records")
    pids = {n: json.loads((out / f"{n}.json").read_text())["pid"] for n in ("a", "b")}
    waiting = [
        exp.create_job(n, cluster=cluster, command_line=CHECK.format(out=out, name=n)).submit()
        for n in ("c", "d")
    ]
    state = _sched_state(ws, "c")
    old = scheduler_pid(state)
    assert old is not None
    (state / "sched.db").unlink()  # the database is lost while a and b run
    wait_for(lambda: not pid_alive(old), 30, "the scheduler to notice its database is gone")
    ws.backend.scheduler(cluster.spec).ensure_running()  # a new scheduler, a new database
    for job in waiting:
        assert job.wait(timeout=90) is JobState.SUCCEEDED, job.status.failure_reason
    assert not list(out.glob("SHARED-*")), [p.read_text() for p in out.glob("SHARED-*")]
    assert sorted(p.name for p in out.glob("ran-*")) == ["ran-c", "ran-d"]
    for job in holders:
        assert job.wait(timeout=60) is JobState.FAILED
        assert "database" in (job.status.failure_reason or ""), job.status.failure_reason
    assert not any(pid_alive(p) for p in pids.values())
