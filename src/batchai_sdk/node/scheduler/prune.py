"""What the head node keeps of ended jobs: their rows in ``sched.db`` and their node-local folders
(assignment, launcher log, result) go once they are no longer needed, so a cluster that ran a million jobs
holds no more than one that ran a thousand.

An ended job is kept while it is among the newest ``keep_jobs`` ended jobs (default 1000) *and* ended less
than ``keep_days`` days ago (default 7); the newest ended job is always kept (it dates the cluster's idle
time). Only published rows go: the share's ``status.json`` is the job's lasting record, and it is written
before the row may be dropped. Both limits come from the cluster's configuration (``keep_ended_jobs``,
``keep_ended_days``). The folder is removed before the row, so a crash between the two leaves a row
whose folder is already gone, and the next pass drops it.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime

from .store import Store

KEEP_JOBS = 1000
KEEP_DAYS = 7.0
EVERY_S = 60.0  # how often the scheduler looks


def _ended_before(end_time: str | None, cutoff: float) -> bool:
    try:
        return end_time is not None and datetime.fromisoformat(end_time).timestamp() < cutoff
    except ValueError:
        return True  # an unreadable end time dates nothing


def prune(store: Store, now: float | None = None) -> int:
    """Drop the ended jobs past the limits; returns how many went."""
    now = time.time() if now is None else now
    keep_jobs = max(1, int(store.cfg.get("keep_ended_jobs") or KEEP_JOBS))
    keep_days = float(store.cfg.get("keep_ended_days") or KEEP_DAYS)
    cutoff = now - keep_days * 86400
    ended = store.ended()
    gone = 0
    for rank, row in enumerate(ended):
        if rank == 0 or not row["published"]:
            continue
        if rank < keep_jobs and not _ended_before(row["end_time"], cutoff):
            continue
        shutil.rmtree(store.job_state_dir(row["id"]), ignore_errors=True)
        if os.path.exists(store.job_state_dir(row["id"])):
            continue  # could not be removed (a full or read-only disk): tried again next time
        store.forget(row["id"])
        gone += 1
    return gone
