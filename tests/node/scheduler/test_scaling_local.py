"""Autoscale on the local backend with real processes: the cluster's scheduler grows it for queued jobs
and lets idle nodes go, with no client left running; every decision is in the event log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import CapacityError, ValidationError, Workspace
from batchai_sdk._models import NodeCounts

pytestmark = pytest.mark.mpi

SUBMIT = """
    from batchai_sdk import Workspace
    ws = Workspace.local(root={root!r})
    exp = ws.create_experiment("e", exist_ok=True)
    exp.create_job("wide", cluster="auto", node_count=2, command_line="sleep 1").submit()
    exp.create_job("one", cluster="auto", node_count=1, command_line="sleep 1").submit()
"""


def test_the_scheduler_grows_for_the_queue_and_scales_to_zero_without_the_client(
    ws: Workspace, tmp_path: Path
) -> None:
    cluster = ws.create_cluster(
        "auto", vm_size="Standard_NC6", min_nodes=0, max_nodes=2, idle_seconds_before_scaledown=2
    )
    assert cluster.target_nodes == 0 and cluster.node_counts == NodeCounts()
    client = textwrap.dedent(SUBMIT.format(root=str(ws.backend.root)))  # type: ignore[attr-defined]
    subprocess.run([sys.executable, "-c", client], check=True, timeout=120)  # submits, then exits
    exp = ws.get_experiment("e")
    wide, one = exp.get_job("wide"), exp.get_job("one")
    assert wide.wait(timeout=60).value == "succeeded" and one.wait(timeout=60).value == "succeeded"
    assert wide.status.nodes and len(wide.status.nodes) == 2
    deadline = time.monotonic() + 30
    while cluster.target_nodes != 0:  # nobody calls the scheduler: it shrinks the cluster by itself
        assert time.monotonic() < deadline, cluster.events()
        time.sleep(0.2)
    events = cluster.events()
    assert events[0]["from"] == 0 and events[0]["to"] == 2 and "queued" in events[0]["reason"]
    assert events[-1]["to"] == 0 and "idle past 2s" in events[-1]["reason"]
    deadline = time.monotonic() + 15
    while any(b"scheduler" in p.read_bytes() and str(tmp_path).encode() in p.read_bytes()
              for p in Path("/proc").glob("[0-9]*/cmdline") if p.exists()):  # fmt: skip
        assert time.monotonic() < deadline, "the scheduler should exit once the cluster is at min_nodes"
        time.sleep(0.2)


def test_autoscale_bounds_and_manual_resize(ws: Workspace) -> None:
    with pytest.raises(ValidationError, match="max_nodes"):
        ws.create_cluster("bad", vm_size="Standard_NC6", min_nodes=3, max_nodes=2)
    with pytest.raises(ValidationError, match="min_nodes"):
        ws.create_cluster("bad", vm_size="Standard_NC6", max_nodes=2)
    cluster = ws.create_cluster("auto", vm_size="Standard_NC6", min_nodes=1, max_nodes=2)
    assert cluster.target_nodes == 1
    exp = ws.create_experiment("e")
    with pytest.raises(CapacityError):  # more than max_nodes is refused at once
        exp.create_job("big", cluster=cluster, node_count=3, command_line="true")
    cluster.resize(2)  # an explicit size turns autoscale off
    assert cluster.spec.autoscale is None and cluster.target_nodes == 2
    assert cluster.events()[-1]["reason"] == "resized by the user (autoscale off)"
    cluster.set_autoscale(min_nodes=0, max_nodes=2, idle_seconds_before_scaledown=0)
    assert cluster.spec.autoscale is not None


def test_cost_so_far_follows_the_size_over_time(ws: Workspace) -> None:
    cluster = ws.create_cluster("priced", vm_size="Standard_NC6", nodes=2, price_per_hour=3600.0)
    created = cluster.spec.created
    time.sleep(0.5)
    first = cluster.cost_so_far or 0.0
    upto = (datetime.now(timezone.utc) - created).total_seconds()
    assert 2 * 0.5 <= first <= 2 * upto  # 2 nodes × the seconds so far × $1/s
    cluster.resize(0)
    resized = datetime.fromisoformat(cluster.events()[-1]["time"])
    time.sleep(0.5)
    # nothing accrues at size 0: the cost stops at the resize, however long the machine took to get there
    assert cluster.cost_so_far == pytest.approx(2 * (resized - created).total_seconds(), abs=0.01)


def test_max_cost_ends_a_job_whose_estimate_passes_it(ws: Workspace) -> None:
    from batchai_sdk import JobState

    cluster = ws.create_cluster("priced", vm_size="Standard_NC6", nodes=2, price_per_hour=3600.0)  # $1/node-s
    exp = ws.create_experiment("e")
    job = exp.create_job("dear", cluster=cluster, node_count=2, command_line="sleep 60", max_cost=3).submit()
    assert job.wait(timeout=30) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert "passed max_cost 3; the job was stopped" in reason, reason
    free = ws.create_cluster("free", vm_size="Standard_NC6", nodes=1)  # local: price 0, never passes
    cheap = exp.create_job("cheap", cluster=free, command_line="sleep 1", max_cost=0.01).submit()
    assert cheap.wait(timeout=30) is JobState.SUCCEEDED


RESIZER = """
    import os, time
    from batchai_sdk import Workspace
    cluster = Workspace.local(root={root!r}).get_cluster("c")
    open({go!r} + "-ready-" + str(os.getpid()), "w").close()
    while not os.path.exists({go!r}):  # both clients start resizing at the same moment
        time.sleep(0.01)
    for i in range(60):
        cluster.resize(1 + i % 2)
"""


def test_two_clients_resizing_at_once_lose_no_event(ws: Workspace, tmp_path: Path) -> None:
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    go = tmp_path / "go"
    code = textwrap.dedent(RESIZER.format(root=str(ws.backend.root), go=str(go)))  # type: ignore[attr-defined]
    clients = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(2)]

    def ready() -> bool:
        return len(list(tmp_path.glob("go-ready-*"))) == 2

    wait_for(lambda: ready() or any(c.poll() is not None for c in clients), timeout=60, what="both clients")
    assert ready(), [c.poll() for c in clients]
    go.touch()
    assert [c.wait(timeout=120) for c in clients] == [0, 0]
    resizes = [e for e in cluster.events() if e["reason"] == "resized by the user"]
    assert len(resizes) == 120  # each client's sixty, none overwritten by the other's
    times = [e["time"] for e in cluster.events()]
    assert times == sorted(times)
