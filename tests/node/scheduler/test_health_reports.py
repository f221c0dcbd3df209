"""Health has an owner: a report changes placement only when the cluster's scheduler signed it (its gate's,
or the admin's through ``check_nodes``/``apply_health_report``). What a job writes into the cluster's
``health/`` folder (which it can reach: it is on the share) is ignored — a forged failure, a forged pass, a
FIFO, a huge file — and a pass supersedes older failures for good, across a restart of the scheduler.
Reasons are clipped before they reach ``nodes.json``, events and the log."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from _procs import wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import JobState, Workspace
from batchai_sdk import _layout as layout
from health_jobs import FORGER

pytestmark = pytest.mark.slow


def _health_folder(ws: Workspace, cluster: str) -> Path:
    root: Path = ws.share.root  # type: ignore[attr-defined]  # the local backend's share is a folder
    return root / layout.SHARE.cluster_dir(cluster) / "health"


def _state(ws: Workspace, cluster: str) -> Path:
    return ws.backend.root / "tmp" / "scheduler" / cluster  # type: ignore[attr-defined,no-any-return]


def test_a_report_a_job_writes_into_the_health_folder_changes_nothing(ws: Workspace, tmp_path: Path) -> None:
    cluster = ws.create_cluster("c", nodes=2)
    exp = ws.create_experiment("e")
    nodes = sorted(cluster.node_states())
    forger = tmp_path / "forge.py"
    forger.write_text(FORGER)
    folder = _health_folder(ws, "c")
    job = exp.create_job("forge", cluster=cluster, toolkit="custom",
                         command_line=f"python {forger} {folder} {','.join(nodes)}")  # fmt: skip
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    t = time.monotonic()
    both = exp.create_job("both", cluster=cluster, node_count=2, command_line="true", toolkit="custom")
    both.submit()  # no UnhealthyNodesError: the forged failure is not believed, the FIFO stalls nothing
    assert time.monotonic() - t < 10
    assert both.wait(timeout=120) is JobState.SUCCEEDED
    assert cluster.unusable_nodes() == {}
    assert not [e for e in cluster.events() if e.get("kind") == "unusable"]
    log = (_state(ws, "c") / "scheduler.log").read_text()
    assert "not signed" in log and len(log) < 1 << 20  # the 8 MB reason reached no log


def test_a_pass_supersedes_older_failures_for_good_and_a_forged_pass_lets_nothing_in(
    ws: Workspace, tmp_path: Path
) -> None:
    cluster = ws.create_cluster("c", nodes=2)
    exp = ws.create_experiment("e")
    first, second = sorted(cluster.node_states())
    why = f"{second} gpu0-ecc uncorrected=3 FAIL " + "x" * 5000
    cluster.apply_health_report({"level": "basic", "nodes": [first, second], "unusable": {second: why}})
    [reason] = cluster.unusable_nodes().values()
    assert reason.startswith(f"{second} gpu0-ecc uncorrected=3 FAIL") and len(reason) <= 512
    [event] = [e for e in cluster.events() if e.get("kind") == "unusable"]
    assert len(json.dumps(event)) < 1024
    # a job forges a pass for the failed node: it stays out
    forged = {"level": "full", "nodes": [second], "unusable": {}, "checks": [], "started": time.time() + 60}
    job = exp.create_job("forge", cluster=cluster, toolkit="custom", command_line="python -c "
                         f"\"import pathlib; pathlib.Path('{_health_folder(ws, 'c')}/99999999999-pass.json')"
                         f".write_text('{json.dumps(forged)}')\"")  # fmt: skip
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    cluster.workspace.backend.scheduler(cluster.spec).sync_health()
    assert set(cluster.unusable_nodes()) == {second}
    # the admin's check passes both; the scheduler restarts: the old failure is not applied again
    report = cluster.check_nodes("basic")
    assert report.unusable == {} and cluster.unusable_nodes() == {}
    pid = scheduler_pid(_state(ws, "c"))
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: scheduler_pid(_state(ws, "c")) is None, 30, "the scheduler to go")
    two = exp.create_job("two", cluster=cluster, node_count=2, command_line="true", toolkit="custom")
    two.submit()
    assert two.wait(timeout=120) is JobState.SUCCEEDED
    assert cluster.unusable_nodes() == {}
