"""Slurm's estimated start in ``job.status.pending``: a job behind one with a 2-minute limit that holds both
CPUs gets ``squeue --start``'s estimate (the backfill scheduler's, from that limit), about 2 minutes from
when the first started; a job behind one without a limit gets none where Slurm gives none."""

from __future__ import annotations

import time

import pytest
from slurm_daemons import SlurmCluster
from slurm_jobs import status, submit, wait

from batchai_sdk import Workspace

pytestmark = pytest.mark.slurm


def test_a_job_behind_one_with_a_time_limit_shows_slurms_estimated_start(
    slurm: SlurmCluster, slurm_ws: Workspace
) -> None:
    submit(slurm_ws, "hog", "import time\ntime.sleep(300)\n", process_count=2, max_wall_clock_seconds=120)
    wait(slurm_ws, "hog", until="running")
    started = time.time()
    submit(slurm_ws, "next", "print('ran')\n")
    try:
        deadline = time.monotonic() + 60
        why = status(slurm_ws, "next").pending
        while time.monotonic() < deadline and (why is None or why.estimated_start is None):
            time.sleep(0.5)
            why = status(slurm_ws, "next").pending
        assert why is not None and why.estimated_start is not None, why
        start = why.estimated_start
        assert start.tzinfo is not None
        # the hog's 2 minutes from its start (Slurm counts whole minutes and whole seconds)
        assert abs(start.timestamp() - (started + 120)) <= 12, (why.estimated_start, started)
    finally:
        slurm.command("scancel", "-n", "batchai.slurmws.exp.hog")
        slurm.command("scancel", "-n", "batchai.slurmws.exp.next")
