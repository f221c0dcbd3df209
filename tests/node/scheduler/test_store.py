"""What the scheduler's store promises its clients, seen through the socket's replies: a submit is kept
whole (its row, its folder and its secrets) or not at all, so a submit the head node's disk refused
leaves no job behind, no half-queued job without its secrets, and no used-up ``request_id``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _configs import local_cluster_config
from batchai_sdk.node.scheduler.daemon import Scheduler


def _scheduler(root: Path) -> Scheduler:
    state = root / "state"
    state.mkdir()
    cfg = local_cluster_config(root / "share", 1)
    Path(cfg["cluster_dir"]).mkdir(parents=True)
    (state / "cluster.json").write_text(json.dumps(cfg))
    return Scheduler(str(state))


def _stage(root: Path, name: str, command: str) -> Path:
    """The job's records on the share as the client leaves them before its submit."""
    base = root / "share" / ".batchai" / "experiments" / "e" / "jobs" / name
    for sub in ("run", "wd", "stdouterr"):
        (base / sub).mkdir(parents=True)
    launch = {
        "job": f"e/{name}",
        "toolkit": "custom",
        "python": sys.executable,
        "command_line": command,
        "env": {"AZ_BATCHAI_JOB_TEMP": str(root / "tmp" / name)},
        "expand_env": [],
        "stdouterr_dir": str(base / "stdouterr"),
        "wd": str(base / "wd"),
        "run_dir": str(base / "run"),
        "hostfile": str(base / "run" / "hostfile"),
        "ranks_per_node": [1],
        "head": "n0",
        "ssh_command": None,
        "job_preparation": None,
        "share_root": str(root / "share"),
        "node_count": 1,
    }
    (base / "run" / "launch.json").write_text(json.dumps(launch))
    (base / "status.json").write_text(json.dumps({"state": "queued"}))
    return base


def _ask(sched: Scheduler, request: dict[str, Any]) -> dict[str, Any]:
    return sched.answer(json.dumps(request).encode())


def test_a_submit_the_head_disk_refused_leaves_no_job_and_the_same_request_is_accepted_later(
    tmp_path: Path,
) -> None:
    sched = _scheduler(tmp_path)
    job = _stage(tmp_path, "x", 'test "$TOKEN" = s3cret')
    submit = {"op": "submit", "experiment": "e", "name": "x", "node_count": 1, "request_id": "r1"}
    submit["secrets"] = {"TOKEN": "s3cret"}
    blocker = tmp_path / "state" / "jobs" / "1"  # where the job's folder and secrets go: the disk refuses it
    blocker.parent.mkdir()
    blocker.write_text("")

    refused = _ask(sched, submit)
    assert not refused["ok"], refused
    assert _ask(sched, {"op": "job", "experiment": "e", "name": "x"}) == {"ok": True, "found": False}

    blocker.unlink()  # the fault is over: the client sends the same request again
    accepted = _ask(sched, submit)
    assert accepted["ok"] and "repeated" not in accepted, accepted  # the refused one left no trace
    secrets = Path(sched.store.job_state_dir(accepted["id"])) / "secrets.json"
    assert secrets.stat().st_mode & 0o777 == 0o600
    deadline = time.monotonic() + 30
    while json.loads((job / "status.json").read_text())["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, "the job did not end"
        sched.watch()
        sched.reap_cleaned()
        sched.publish()
        time.sleep(0.02)
    assert json.loads((job / "status.json").read_text())["state"] == "succeeded"  # it ran with its secret
    assert not os.path.exists(secrets)  # dropped once the job ended
