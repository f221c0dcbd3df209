"""Why a job waits in a real Slurm: squeue's Reason as ``job.status.pending`` (held by an admin, behind a
full node, in a partition that is down)."""

from __future__ import annotations

import time

import pytest
from slurm_daemons import SlurmCluster
from slurm_jobs import status, submit, wait

from batchai_sdk import JobState, PendingReason, Workspace

pytestmark = pytest.mark.slurm


def pending_of(ws: Workspace, name: str, kind: str, timeout: float = 30) -> PendingReason:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        st = status(ws, name)
        assert st.state is JobState.QUEUED, st
        seen = st.pending
        if seen is not None and seen.kind == kind:
            return seen
        time.sleep(0.3)
    raise AssertionError(f"{name}: pending {kind} expected, saw {seen}")


def test_squeue_reasons_are_typed_pending_reasons(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    submit(slurm_ws, "hog", "import time\ntime.sleep(300)\n", process_count=2)  # both CPUs
    wait(slurm_ws, "hog", until="running")
    submit(slurm_ws, "behind", "print('ran')\n")
    why = pending_of(slurm_ws, "behind", "waiting_for_nodes")
    assert why.source == "Resources" and "Slurm: Resources" in why.message
    job_id = slurm.command("squeue", "-h", "-n", "batchai.slurmws.exp.behind", "-o", "%i").stdout.strip()
    slurm.command("scontrol", "hold", job_id)  # an admin holds it
    held = pending_of(slurm_ws, "behind", "held")
    assert held.source is not None and held.source.startswith("JobHeld")
    slurm.command("scontrol", "release", job_id)
    slurm.command("scancel", "-n", "batchai.slurmws.exp.hog")
    slurm.command("scontrol", "update", f"PartitionName={slurm.partition}", "State=DOWN")
    try:
        down = pending_of(slurm_ws, "behind", "cluster_at_zero")
        assert down.source == "PartitionDown"
    finally:
        slurm.command("scontrol", "update", f"PartitionName={slurm.partition}", "State=UP")
