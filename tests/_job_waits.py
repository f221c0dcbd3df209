"""Waiting on a job as a user's script would: until it is queued with a given pending reason, or running."""

from __future__ import annotations

import time

from batchai_sdk import JobState, PendingReason
from batchai_sdk.job import Job


def pending_of(job: Job, kind: str, timeout: float = 30.0) -> PendingReason:
    """The job's pending reason once it is ``kind`` (the scheduler publishes it within a pass)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        st = job.status
        assert st.state is JobState.QUEUED, (st.state, st.failure_reason, seen)
        seen = st.pending
        if seen is not None and seen.kind == kind:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{job.name}: pending {kind} expected, saw {seen}")


def running(job: Job, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while job.state is not JobState.RUNNING:
        assert time.monotonic() < deadline and not job.state.ended, job.status
        time.sleep(0.1)
