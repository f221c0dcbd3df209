"""The scheduler daemon in-process on tmp_path (node/scheduler/daemon.py), driven
by hand (requests, then its loop's steps) with real launchers and ranks as child processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import batchai_sdk.node
from _configs import local_cluster_config
from batchai_sdk.node.job import procs
from batchai_sdk.node.scheduler.daemon import RequestError, Scheduler

NODE_MAIN = str(Path(batchai_sdk.node.__file__).parent / "__main__.py")


# -- the scheduler, driven by hand --------------------------------------------------------------------
class Harness:
    def __init__(self, root: Path, nodes: int = 2) -> None:
        self.root = root
        self.share = root / "share"
        self.state = root / "state"
        self.state.mkdir(parents=True)
        self.cfg: dict[str, Any] = local_cluster_config(self.share, nodes)
        (self.state / "cluster.json").write_text(json.dumps(self.cfg))
        Path(self.cfg["cluster_dir"]).mkdir(parents=True)
        self.sched = Scheduler(str(self.state))

    def job_dir(self, name: str) -> Path:
        return self.share / ".batchai" / "experiments" / "e" / "jobs" / name

    def stage(self, name: str, command: str, nodes: int = 1) -> None:
        base = self.job_dir(name)
        for sub in ("run", "wd", "stdouterr"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        launch = {
            "job": f"e/{name}",
            "toolkit": "custom",
            "python": sys.executable,
            "command_line": command,
            "env": {"AZ_BATCHAI_JOB_TEMP": str(self.root / "tmp" / name)},
            "expand_env": [],
            "stdouterr_dir": str(base / "stdouterr"),
            "wd": str(base / "wd"),
            "run_dir": str(base / "run"),
            "hostfile": str(base / "run" / "hostfile"),
            "ranks_per_node": [1] * nodes,
            "head": "n0",
            "ssh_command": None,
            "job_preparation": None,
            "share_root": str(self.share),
            "node_count": nodes,
        }
        (base / "run" / "launch.json").write_text(json.dumps(launch))
        (base / "status.json").write_text(json.dumps({"state": "queued"}))

    def submit(self, name: str, command: str, nodes: int = 1, **extra: Any) -> dict[str, Any]:
        self.stage(name, command, nodes)
        return self.sched.handle(
            {"op": "submit", "experiment": "e", "name": name, "node_count": nodes, **extra}
        )

    def status(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.job_dir(name) / "status.json").read_text())
        return data

    def pump(self, until: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise AssertionError("timed out")
            self.sched.watch()
            self.sched.reap_cleaned()
            self.sched.schedule()
            self.sched.publish()
            time.sleep(0.02)

    def ended(self, name: str) -> Callable[[], bool]:
        return lambda: self.status(name)["state"] in ("succeeded", "failed", "terminated")

    def row(self, name: str) -> Any:
        return self.sched.store.runs(f"e/{name}")[-1]


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    for row in harness.sched.store.jobs():
        if row["tag"] is not None:
            procs.reap(row["tag"], grace=1)


def test_queue_assignment_and_published_records(h: Harness) -> None:
    h.submit("a", "sleep 0.5", nodes=2)
    h.submit("b", "exit 3")
    h.submit("c", "true")
    assert h.row("a")["state"] == "running" and json.loads(h.row("a")["nodes"]) == ["n0", "n1"]
    held = json.loads((Path(h.cfg["cluster_dir"]) / "nodes.json").read_text())
    assert set(held["nodes"]) == {"n0", "n1"} and held["queued"] == ["e/b", "e/c"]
    h.pump(lambda: all(h.ended(n)() for n in "abc"))
    assert h.status("a")["state"] == "succeeded"
    b = h.status("b")
    assert b["state"] == "failed" and "exited with code 3" in b["failure_reason"]
    assert h.row("b")["started"] >= h.row("a")["started"]
    assert h.sched.idle()


def test_a_name_runs_once_and_a_repeated_request_is_not_a_second_job(h: Harness) -> None:
    first = h.submit("x", "sleep 5", request_id="r1")
    again = h.sched.handle(
        {"op": "submit", "experiment": "e", "name": "x", "node_count": 1, "request_id": "r1"}
    )
    assert again == {"ok": True, "id": first["id"], "key": "e/x", "repeated": True}
    with pytest.raises(RequestError) as err:
        h.sched.handle({"op": "submit", "experiment": "e", "name": "x", "node_count": 1, "request_id": "r2"})
    assert err.value.code == "exists"
    with pytest.raises(RequestError) as bad:
        h.sched.handle({"op": "submit", "experiment": "e", "name": "../x", "node_count": 1})
    assert bad.value.code == "invalid"
    with pytest.raises(RequestError) as big:
        h.sched.handle({"op": "submit", "experiment": "e", "name": "y", "node_count": 3})
    assert big.value.code == "capacity"


def test_terminate_queued_and_running_jobs(h: Harness) -> None:
    h.submit("run", "sleep 60", nodes=2)
    h.submit("wait", "true")
    h.pump(lambda: h.row("run")["phase"] == "running" and procs.tagged_pids(h.row("run")["tag"]) != [])
    assert h.sched.handle({"op": "terminate", "experiment": "e", "name": "wait"})["found"]
    assert h.status("wait")["state"] == "terminated"
    h.sched.handle({"op": "terminate", "experiment": "e", "name": "run"})
    h.pump(h.ended("run"))
    assert h.status("run")["state"] == "terminated"
    assert procs.tagged_pids(h.row("run")["tag"]) == []
    assert h.sched.handle({"op": "terminate", "experiment": "e", "name": "gone"}) == {
        "ok": True,
        "found": False,
    }


def test_wall_clock_limit_ends_the_job(h: Harness) -> None:
    h.submit("slow", "sleep 60", max_wall_clock_seconds=0.5)
    h.pump(h.ended("slow"))
    status = h.status("slow")
    assert status["state"] == "failed" and "maxWallClockTime of 0.5s exceeded" in status["failure_reason"]
    assert procs.tagged_pids(h.row("slow")["tag"]) == []


def test_a_killed_launcher_fails_the_job_and_its_processes_are_ended(h: Harness) -> None:
    h.submit("lost", "sleep 60")
    h.pump(lambda: h.row("lost")["phase"] == "running" and len(procs.tagged_pids(h.row("lost")["tag"])) >= 3)
    os.kill(h.row("lost")["launcher_pid"], signal.SIGKILL)
    h.pump(h.ended("lost"))
    assert "launcher was killed by signal 9" in h.status("lost")["failure_reason"]
    assert procs.tagged_pids(h.row("lost")["tag"]) == []


def test_an_unwritable_share_keeps_the_outcome_until_it_can_be_written(h: Harness) -> None:
    h.submit("late", "sleep 2; exit 7")  # long enough to be seen running
    h.pump(lambda: h.row("late")["phase"] == "running")
    record = h.job_dir("late") / "status.json"
    record.unlink()
    (record / "blocked").mkdir(parents=True)  # the record cannot be replaced: every publish of it fails
    h.pump(lambda: h.row("late")["state"] == "failed")
    assert h.row("late")["published"] == 0 and not h.sched.idle()
    (record / "blocked").rmdir()
    record.rmdir()
    h.pump(lambda: h.row("late")["published"] == 1)
    status = h.status("late")
    assert status["state"] == "failed" and status["exit_code"] == 7


def test_a_restarted_scheduler_adopts_a_running_launcher(h: Harness) -> None:
    h.submit("long", "sleep 1")
    h.pump(lambda: h.row("long")["phase"] == "running")
    h.sched.store.close()
    h.sched = Scheduler(str(h.state))  # the old one is gone; its launcher is not its child any more
    h.sched.adopt()
    h.pump(h.ended("long"), timeout=30)
    assert h.status("long")["state"] == "succeeded"


def test_a_new_database_rebuilds_the_queue_from_the_share(tmp_path: Path) -> None:
    first = Harness(tmp_path / "one")
    spec = json.dumps({"spec": {"cluster": "c", "node_count": 1}})
    reporter = {"host": "head", "pid": 1, "job_id": 7}
    for name in ("q1", "r1", "inflight"):
        first.stage(name, "true")
        (first.job_dir(name) / "job.json").write_text(spec)
    (first.job_dir("q1") / "status.json").write_text(json.dumps({"state": "queued", "reporter": reporter}))
    running = {"state": "running", "nodes": ["n0"], "start_time": "2026-01-01T00:00:00+00:00"}
    (first.job_dir("r1") / "status.json").write_text(json.dumps({**running, "scheduler": reporter}))
    (first.state / "sched.db").unlink()  # the head node was replaced: its local state is gone
    rebuilt = Scheduler(str(first.state))
    assert rebuilt.rebuilt == 2  # "inflight" has no scheduler's record: its submit is still its client's
    first.sched = rebuilt
    rebuilt.adopt()
    first.pump(lambda: first.ended("q1")() and first.ended("r1")())
    assert first.status("q1")["state"] == "succeeded"
    r1 = first.status("r1")
    assert r1["state"] == "failed" and "database was lost" in r1["failure_reason"]
    assert first.status("inflight") == {"state": "queued"} and not first.sched.store.runs("e/inflight")
    assert first.sched.handle({"op": "submit", "experiment": "e", "name": "n", "node_count": 1})["id"] > 7


def test_a_job_whose_head_node_was_lost_mid_run_is_requeued_while_its_retries_allow(tmp_path: Path) -> None:
    first = Harness(tmp_path / "one")
    reporter = {"host": "head", "pid": 1, "job_id": 3}
    running = {"state": "running", "nodes": ["n0"], "start_time": "2026-01-01T00:00:00+00:00", "tag": "t0"}
    for name, retries in (("again", 1), ("spent", 0)):
        first.stage(name, "true")
        spec = {"cluster": "c", "node_count": 1, "max_retries": retries}
        (first.job_dir(name) / "job.json").write_text(json.dumps({"spec": spec}))
        (first.job_dir(name) / "status.json").write_text(json.dumps({**running, "scheduler": reporter}))
    (first.state / "sched.db").unlink()  # the head node was lost: its local state went with it
    first.sched = Scheduler(str(first.state))
    first.sched.adopt()
    first.pump(lambda: first.ended("again")() and first.ended("spent")())
    again = first.status("again")
    assert again["state"] == "succeeded", again  # requeued from its checkpoint, run again
    assert [a["cause"] for a in again["attempts"]] == ["node_lost", "exit"]
    assert "database was lost" in again["attempts"][0]["reason"]
    spent = first.status("spent")
    assert spent["state"] == "failed" and "database was lost" in spent["failure_reason"]


def test_a_requeued_job_rebuilt_after_its_head_node_keeps_its_attempts_and_retries(tmp_path: Path) -> None:
    first = Harness(tmp_path / "one")
    reporter = {"host": "head", "pid": 1, "job_id": 3}
    earlier = {"index": 0, "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:01:00+00:00",
               "nodes": ["n0"], "cause": "node_lost", "exit_code": None, "reason": "node n0 stopped answering"}  # fmt: skip
    first.stage("requeued", "true")
    spec = {"cluster": "c", "node_count": 1, "max_retries": 2}
    (first.job_dir("requeued") / "job.json").write_text(json.dumps({"spec": spec}))
    queued = {"state": "queued", "attempt": 1, "attempts": [earlier], "scheduler": reporter}
    (first.job_dir("requeued") / "status.json").write_text(json.dumps(queued))
    (first.state / "sched.db").unlink()  # its scheduler (which requeued it) was lost with its head node
    first.sched = Scheduler(str(first.state))
    first.sched.adopt()
    first.pump(first.ended("requeued"))
    done = first.status("requeued")
    assert done["state"] == "succeeded", done
    # one job across the two schedulers: the attempt before the loss is kept, the next one numbered on
    assert [a["cause"] for a in done["attempts"]] == ["node_lost", "exit"], done["attempts"]
    assert done["attempts"][1]["index"] == 1


def test_a_job_deleted_from_the_share_is_not_published_for_ever(h: Harness) -> None:
    import shutil

    h.submit("gone", "sleep 2")  # long enough to be seen running
    h.pump(lambda: h.row("gone")["phase"] == "running")
    shutil.rmtree(h.job_dir("gone"))
    h.pump(lambda: h.row("gone")["state"] != "running" and h.row("gone")["published"] == 1)
    assert h.sched.idle()


# -- what the head node keeps (R10) ---------------------------------------------------------------------
def test_ended_jobs_are_pruned_past_the_limits_and_their_records_stay(h: Harness) -> None:
    from batchai_sdk.node.scheduler import prune

    for name in ("p1", "p2", "p3", "p4"):
        h.submit(name, "true")
        h.pump(h.ended(name))
    folders = {n: Path(h.sched.job_state_dir(h.row(n)["id"])) for n in ("p1", "p2", "p3", "p4")}
    assert all(f.is_dir() for f in folders.values())
    h.sched.cfg["keep_ended_jobs"] = 2
    assert prune.prune(h.sched.store) == 2
    assert [r["key"] for r in h.sched.store.jobs()] == ["e/p3", "e/p4"]
    assert not folders["p1"].exists() and not folders["p2"].exists() and folders["p4"].is_dir()
    assert h.status("p1")["state"] == "succeeded"  # the share's record is the lasting one
    h.sched.cfg["keep_ended_jobs"] = 1000
    assert prune.prune(h.sched.store, now=time.time() + 8 * 86400) == 1  # past 7 days: all but the newest
    assert [r["key"] for r in h.sched.store.jobs()] == ["e/p4"]
    h.submit("p1", "true")  # a pruned name runs again
    h.pump(h.ended("p1"))


def test_queued_records_are_written_on_change_and_the_queue_beats_in_nodes_json(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchai_sdk._models import JobStatus
    from batchai_sdk.backends.head_scheduler import with_cluster_heartbeat
    from batchai_sdk.node.scheduler import publish
    from batchai_sdk.share import LocalShare

    monkeypatch.setattr(publish, "HEARTBEAT", 0.3)
    h.submit("hold", "sleep 30", nodes=2)
    for name in ("w1", "w2", "w3"):
        h.submit(name, "true")
    h.pump(lambda: h.row("hold")["phase"] == "running")
    queued = {n: (h.job_dir(n) / "status.json").stat().st_mtime_ns for n in ("w1", "w2", "w3")}
    running = (h.job_dir("hold") / "status.json").stat().st_mtime_ns
    nodes_json = Path(h.cfg["cluster_dir"]) / "nodes.json"
    beat = json.loads(nodes_json.read_text())["heartbeat"]
    deadline = time.monotonic() + 1.5
    h.pump(lambda: time.monotonic() > deadline)
    assert {n: (h.job_dir(n) / "status.json").stat().st_mtime_ns for n in queued} == queued
    assert (h.job_dir("hold") / "status.json").stat().st_mtime_ns > running  # a running job still beats
    assert json.loads(nodes_json.read_text())["heartbeat"] > beat
    # a reader takes the queue's heartbeat: the untouched queued record does not read as lost
    share = LocalShare(h.share)
    rel = ".batchai/experiments/e/jobs/w1/status.json"
    record = share.read_json(rel)
    assert JobStatus.from_record(record, timeout=0.5, now=_later(record["heartbeat"], 1.0)).lost
    fresh = with_cluster_heartbeat(share, "c", record)
    assert fresh is not None and fresh["heartbeat"] > record["heartbeat"]
    assert not JobStatus.from_record(fresh, timeout=1.4, now=_later(record["heartbeat"], 1.5)).lost
    h.sched.handle({"op": "terminate", "experiment": "e", "name": "hold"})
    h.pump(lambda: all(h.ended(n)() for n in ("hold", "w1", "w2", "w3")))


def _later(iso: str, seconds: float) -> Any:
    from datetime import datetime, timedelta

    return datetime.fromisoformat(iso) + timedelta(seconds=seconds)


def test_a_lost_database_numbers_new_jobs_above_the_folders_it_left(h: Harness) -> None:
    (h.state / "jobs" / "5").mkdir(parents=True)
    (h.state / "jobs" / "5" / "secrets.json").write_text('{"OLD": "x"}')  # an old job's, not the next one's
    h.sched.store.close()
    (h.state / "sched.db").unlink()
    h.sched = Scheduler(str(h.state))
    assert h.submit("fresh", "true")["id"] == 6
