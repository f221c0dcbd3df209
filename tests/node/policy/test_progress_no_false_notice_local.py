"""No false hang notice: 20 runs of a healthy job whose steps are uneven (a slow data loader: most batches in
0.2 s, every fifth in 2.5 s, one in 12 s), run at once on 20 local nodes. The 12 s batch is past 3 × the
median step and past the point where the watchdog collects stacks ahead of its limit (15 s here: the steps
rule's floor, ``hang_notice=15``), but short of the limit: the early stacks are dropped and no run is noticed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.slow
Script = Callable[[str, str], Path]
RUNS = 20

TRAIN = """\
import time
from batchai_sdk import log_metric

def loader():  # a slow data loader: uneven batches, one very slow
    for batch in range(1, 31):
        time.sleep(12 if batch == 18 else 2.5 if batch % 5 == 0 else 0.2)
        yield batch

for step, batch in enumerate(loader(), 1):
    print(f"step {step}", flush=True)
    log_metric(step=step, loss=1.0 / step)
"""


def test_twenty_healthy_runs_with_a_slow_data_loader_get_no_notice(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=RUNS)
    train = script("train.py", TRAIN)
    jobs = [
        exp.create_job(f"run{n}", cluster=cluster, python_script=str(train), hang_notice=15).submit()
        for n in range(RUNS)
    ]
    noticed: dict[str, str] = {}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not all(job.state.ended for job in jobs):
        for job in jobs:
            notice = job.status.notice
            if notice:
                noticed.setdefault(job.name, notice)
        time.sleep(0.5)
    assert [job.status.state for job in jobs] == [JobState.SUCCEEDED] * RUNS
    assert [job.tail("metrics.jsonl", 1) != [] for job in jobs] == [True] * RUNS
    printed = [
        job.name for job in jobs if any(line.startswith("[batchai] ") for line in job.tail("stdout.txt", 100))
    ]
    assert noticed == {} and printed == [], (noticed, printed)
    # the watchdog did take each run's stacks during the 12 s batch, ahead of its limit, and dropped them
    assert [bool(job.tail(f"stacks-{job.status.nodes[0]}.txt", 1)) for job in jobs] == [True] * RUNS
