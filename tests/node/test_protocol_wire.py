"""The wire between a client and its cluster's scheduler (node/protocol/): a ping tells a scheduler of another
version apart (``ProtocolMismatchError``, with both numbers and the process), and a control call carries a
job reference only: the cluster's configuration travels only where ``ctl`` must start the scheduler."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _procs import wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import JobState, ProtocolMismatchError, Workspace
from batchai_sdk.node.protocol.names import E_NEEDS_CLUSTER, PROTOCOL

NODE_PACKAGE = Path(__file__).resolve().parents[2] / "src" / "batchai_sdk" / "node"


def _state(ws: Workspace, cluster: str) -> Path:
    return ws.backend.root / "tmp" / "scheduler" / cluster  # type: ignore[attr-defined,no-any-return]


@pytest.fixture
def other_version(tmp_path: Path) -> Iterator[Path]:
    """The node code of a batchai_sdk whose wire is one version older (PROTOCOL - 1)."""
    code = tmp_path / "older" / "batchai_node"
    shutil.copytree(NODE_PACKAGE, code, ignore=shutil.ignore_patterns("__pycache__"))
    names = code / "protocol" / "names.py"
    text = names.read_text()
    assert f"PROTOCOL = {PROTOCOL}\n" in text
    names.write_text(text.replace(f"PROTOCOL = {PROTOCOL}\n", f"PROTOCOL = {PROTOCOL - 1}\n"))
    yield code / "__main__.py"


def test_a_scheduler_of_another_protocol_is_refused_with_both_numbers(
    ws: Workspace, other_version: Path
) -> None:
    cluster = ws.create_cluster("c", nodes=1)
    scheduler = ws.backend.scheduler(cluster.spec)
    scheduler.ensure_running()  # this version's: it answers the ping with our number
    state = _state(ws, "c")
    pid = scheduler_pid(state)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)  # an upgrade: the new client meets the old version's scheduler
    wait_for(lambda: scheduler_pid(state) is None, 30, "the scheduler's exit")
    older = subprocess.Popen(
        [sys.executable, "-S", str(other_version), "scheduler", str(state)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: (state / "sched.sock").exists(), 30, "the older scheduler's socket")
        with pytest.raises(ProtocolMismatchError) as caught:
            ws.backend.scheduler(cluster.spec).ensure_running()
        assert (caught.value.ours, caught.value.theirs, caught.value.pid) == (
            PROTOCOL,
            PROTOCOL - 1,
            older.pid,
        )
        assert f"protocol {PROTOCOL - 1}" in str(caught.value) and f"protocol {PROTOCOL}" in str(caught.value)
        assert older.poll() is None  # refused, not harmed: it is the user's to stop
    finally:
        older.terminate()
        older.wait(timeout=30)


def test_control_calls_carry_no_cluster_configuration_and_start_the_scheduler_when_none_runs(
    ws: Workspace,
) -> None:
    cluster = ws.create_cluster("c", nodes=1)
    job = ws.create_experiment("e").create_job("j", cluster="c", toolkit="custom", command_line="sleep 300")
    job.submit()
    wait_for(lambda: job.state is JobState.RUNNING, 60, "the job's start")
    config = _state(ws, "c") / "cluster.json"
    written = config.stat().st_mtime_ns
    scheduler = ws.backend.scheduler(cluster.spec)
    known = scheduler.job_state("e", "j")
    assert known is not None and known["found"] and known["state"] == "running"
    scheduler.ensure_running()
    assert job.terminate(timeout=60) is JobState.TERMINATED
    assert config.stat().st_mtime_ns == written  # no call since the submit carried the configuration
    # once it exits (idle), a control call starts it again: with the configuration, as ctl asks
    wait_for(lambda: scheduler_pid(_state(ws, "c")) is None, 60, "the idle scheduler's exit")
    known = ws.backend.scheduler(cluster.spec).job_state("e", "j")
    assert known is not None and known["found"] and known["state"] == "terminated"


def test_ctl_asks_for_the_configuration_when_no_scheduler_answers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for request in ({"op": "ping"}, {"op": "job", "experiment": "e", "name": "j"}):
        started = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-S", str(NODE_PACKAGE / "__main__.py"), "ctl", str(state)],
            input=json.dumps(request).encode(),
            capture_output=True,
            timeout=60,
            check=True,
        )
        reply = json.loads(res.stdout)
        assert reply["ok"] is False and reply["error"] == E_NEEDS_CLUSTER, reply
        assert time.monotonic() - started < 20  # answered at once, not after a start's timeout
    assert not (state / "cluster.json").exists() and not (state / "sched.sock").exists()
