"""A job's metrics are one run across its attempts (``log_metric`` → ``job.metrics()``, ``plot_metrics()``),
and the metrics views a user reaches from Python and the CLI: real local jobs, real faults
(``Cluster.simulate_eviction``), real files on the share."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

# Attempt a logs up to step 3(a+1), checkpointing one step short of it, then waits to be evicted; the next
# attempt resumes from the checkpoint and so logs that last step again (with another value: 100 × attempt).
RESUMABLE = """
    import os, signal, sys, time
    from batchai_sdk import log_metric
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt = int(os.environ["AZ_BATCHAI_JOB_RESTART_COUNT"])
    print("run", os.environ["AZ_BATCHAI_JOB_RUN_ID"], "attempt", attempt, flush=True)
    ckpt = os.path.join(os.environ["AZ_BATCHAI_JOB_MOUNT_ROOT"], "ckpt")
    done = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
    last = 12 if attempt >= 3 else 3 * (attempt + 1)
    for step in range(done + 1, last + 1):
        log_metric(step, loss=step + 100 * attempt)
        if step == last - 1:
            open(ckpt + ".tmp", "w").write(str(step))
            os.replace(ckpt + ".tmp", ckpt)
    if attempt < 3:
        time.sleep(120)
"""


def _rows(table: Any) -> list[dict[str, Any]]:
    """A table the SDK returned (a DataFrame, or a list of dicts without pandas) as a list of dicts."""
    rows: list[dict[str, Any]] = table.to_dict("records") if hasattr(table, "to_dict") else table
    return rows


def test_metrics_are_one_series_with_one_point_per_step_after_three_evictions(
    ws: Workspace, script: Script
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    job = exp.create_job("resumed", cluster=cluster, python_script=str(script("r.py", RESUMABLE)))
    job.submit()
    assert _rows(job.metrics()) == []  # before the first record: empty, not an error
    for attempt in range(3):
        deadline = time.monotonic() + 60
        while not any(
            r["step"] == 3 * (attempt + 1) and r["attempt"] == attempt for r in _rows(job.metrics())
        ):
            assert time.monotonic() < deadline, (attempt, _rows(job.metrics()), job.status)
            time.sleep(0.2)
        cluster.simulate_eviction(grace_seconds=5)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason

    rows = _rows(job.metrics())
    assert [r["step"] for r in rows] == list(range(1, 13))  # one point per step, in order
    # the step an attempt logged again is the later attempt's (last write wins)
    assert [(r["attempt"], r["loss"]) for r in rows if r["step"] in (2, 3, 6, 9, 12)] == [
        (0, 2), (1, 103), (2, 206), (3, 309), (3, 312),
    ]  # fmt: skip
    # one run id in every attempt, next to the restart count
    ids = {job.tail(f"attempt-{n}/stdout.txt")[0].split()[1] for n in (1, 2, 3)} | {job.tail()[0].split()[1]}
    assert len(ids) == 1 and len(ids.pop()) == 32

    pytest.importorskip("matplotlib")
    fig = job.plot_metrics()
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["loss"].get_xdata()) == list(range(1, 13))
    assert [lines[f"restart {n}"].get_xdata()[0] for n in (1, 2, 3)] == [3, 6, 9]  # where each attempt begins
