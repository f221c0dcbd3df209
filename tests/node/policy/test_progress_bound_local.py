"""The hang verdict on time and without py-spy, with real PyTorch ranks over gloo on 2 local nodes: the notice
comes within its bound (max(3 × the median step interval, the floor)) of the last step, counted on the
job's own clock; with py-spy turned off for the job (``BATCHAI_PY_SPY=off`` in its environment), the ranks'
faulthandler dumps give the same per-rank verdict."""

from __future__ import annotations

import itertools
import json
import statistics
import time
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import Job, Workspace
from batchai_sdk.exceptions import NotFoundError
from hang_jobs import NOTICE, REDUCE_LINE, SLEEP_LINE, TRAIN, start, step_of, write_train

pytest.importorskip("torch")
pytestmark = [pytest.mark.mpi, pytest.mark.slow]
# the same script, its first line also registering faulthandler on SIGUSR1 (the line numbers unchanged)
FAULTHANDLER = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True)\n"


def steps(job: Job) -> list[dict[str, float]]:
    try:
        return [json.loads(line) for line in job.tail("metrics.jsonl", 100000) if line.strip()]
    except (NotFoundError, ValueError):
        return []


def notice_and_delay(job: Job) -> tuple[str, float, float]:
    """The notice, the seconds from the job's last step (its record's time) to the notice, and the bound."""
    wait_for(lambda: step_of(job) >= 3, 180, "three steps")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        notice = job.status.notice
        if notice:
            seen = time.time()
            records = steps(job)
            intervals = [b["time"] - a["time"] for a, b in itertools.pairwise(records)]
            bound = max(3 * statistics.median(intervals), NOTICE)
            return notice, seen - records[-1]["time"], bound
        time.sleep(0.05)
    raise AssertionError(f"no notice in 300 s (state {job.status.state})")


def test_the_notice_comes_within_its_bound_of_the_last_step(
    ws: Workspace, tmp_path: Path, cleanup: list[Job]
) -> None:
    job = start(ws, write_train(tmp_path / "scripts"), "sleep")
    cleanup.append(job)
    notice, took, bound = notice_and_delay(job)
    assert f"rank 1 on {job.status.nodes[1]} is in train.py:{SLEEP_LINE}" in notice, notice
    # the bound itself: the stacks were taken before it, the files looked at every loop turn near it
    assert bound - 1.0 <= took <= bound + 0.75, (took, bound, notice)  # 1-2 s past it before


def test_without_py_spy_the_faulthandler_dumps_give_the_same_verdict(
    ws: Workspace, tmp_path: Path, cleanup: list[Job]
) -> None:
    train = write_train(tmp_path / "scripts")
    train.write_text(FAULTHANDLER.rstrip("\n") + "; " + TRAIN)
    job = start(ws, train, "sleep", environment={"BATCHAI_PY_SPY": "off"})
    cleanup.append(job)
    notice, took, bound = notice_and_delay(job)
    nodes = job.status.nodes
    assert f"rank 1 on {nodes[1]} is in train.py:{SLEEP_LINE} (time.sleep(3600))" in notice, notice
    assert f"rank 0 on {nodes[0]} waits in all_reduce at train.py:{REDUCE_LINE}" in notice, notice
    assert took <= bound + 0.75, (took, bound)
    stacks = job.tail(f"stacks-{nodes[1]}.txt", 60)
    assert any("faulthandler signal SIGUSR1 (BATCHAI_PY_SPY=off" in line for line in stacks), stacks
    assert any(f"=== rank 1 on {nodes[1]}" in line for line in stacks), stacks
    assert any(f"train.py:{SLEEP_LINE} <module>" in line for line in stacks), (
        stacks
    )  # the user's frame, first
    # the dumps themselves went to stderr.txt, and did not count as the job's progress (no withdrawal)
    assert job.status.notice == notice
