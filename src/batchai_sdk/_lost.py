"""When a job counts as lost: a stale status record is only a hint (a full share stops its scheduler's
writes, not its work), so the job's scheduler is asked first; a job it does not know is lost for good, and
its end is written once so that it reads the same from then on (a final state is final)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._models import JobState, JobStatus, heartbeat_timeout, utcnow
from .exceptions import BatchAIError
from .node.protocol.records import StatusDoc

if TYPE_CHECKING:
    from .job import Job

log = logging.getLogger("batchai_sdk")

# two of the scheduler's heartbeats (node/scheduler/publish.py: 10 s) missed: its head node may be lost
TAKEOVER_AFTER_S = 20.0
ASK_EVERY_S = 10.0
_asked: dict[tuple[str, str, str], float] = {}  # (workspace, experiment, job) → when its scheduler was asked


def revive_if_silent(job: Job, status: JobStatus) -> None:
    """A queued or running job whose scheduler missed two heartbeats, or that waits for nodes its scheduler
    found silent: make sure a scheduler runs that this client can reach (at most every ``ASK_EVERY_S`` per
    job). Where the head node was lost, the scheduler starts on the next node that answers and takes the
    cluster over (backends/head_scheduler.py ``heads``): it rebuilds the queue from the share and requeues
    the job from its checkpoint, long before the record counts as lost. A head node cut off from the others
    may still write the share (it beats): the job then waits for ``nodes_down``, and the client revives the
    scheduler elsewhere only if it cannot reach the head node either (``head_lost``)."""
    if status.state not in (JobState.QUEUED, JobState.RUNNING) or status.heartbeat is None:
        return
    stale = (utcnow() - status.heartbeat).total_seconds() >= TAKEOVER_AFTER_S
    waiting = (
        status.state is JobState.QUEUED and status.pending is not None and status.pending.kind == "nodes_down"
    )
    if not (stale or waiting):
        return
    key = (job.workspace.name, job.experiment.name, job.name)
    if time.monotonic() - _asked.get(key, -ASK_EVERY_S) < ASK_EVERY_S:
        return
    _asked[key] = time.monotonic()
    try:
        scheduler = job._scheduler()
        if stale or scheduler.head_lost():
            scheduler.revive()
    except BatchAIError as exc:
        log.debug("could not reach a scheduler for %s: %s", job.name, exc)


def confirm_lost(job: Job, status: JobStatus, record: Mapping[str, Any]) -> JobStatus:
    """``status`` (read as lost) as the job's scheduler holds it: a job it knows keeps its state; one that
    ended there reads as it ended, before the share takes the record; one it does not know stays lost.
    A scheduler that cannot be reached leaves the status as read."""
    try:
        known = job._scheduler().job_state(job.experiment.name, job.name, timeout=30)
    except BatchAIError as exc:
        log.debug("could not ask the scheduler about %s: %s", job.name, exc)
        return status
    if not known:
        return status
    if not known.get("found"):  # its scheduler answers and does not know it: lost for good
        record_lost(job, status, record)
        return status
    fresh: dict[str, Any] = dict(record)
    fresh.update({k: known[k] for k in ("state", "exit_code", "failure_reason", "end_time") if k in known})
    return JobStatus.from_record(fresh)


def record_lost(job: Job, status: JobStatus, record: Mapping[str, Any]) -> None:
    """Write the lost job's end (``failed``, with the reason it was taken for lost)."""
    ended = StatusDoc.from_dict(dict(record)).updated(
        state="failed", failure_reason=status.failure_reason, end_time=utcnow().isoformat()
    )
    try:
        job.workspace.share.write_json(job.paths.status, ended.to_dict())
    except (OSError, BatchAIError) as exc:
        log.debug("could not record the end of lost job %s: %s", job.name, exc)


def end_lost_job(job: Job) -> JobState:
    """Record as terminated a job its scheduler no longer knows (lost with its head node)."""
    share = job.workspace.share
    record = dict(share.read_json_or_none(job.paths.status) or {})
    lost = JobStatus.from_record(record, timeout=heartbeat_timeout())
    if lost.state.ended and not lost.lost:
        return lost.state
    why = lost.failure_reason or "its cluster's scheduler no longer knew it"
    ended = StatusDoc.from_dict(record).updated(
        state="terminated",
        end_time=utcnow().isoformat(),
        failure_reason=f"terminated by the user after {why}",
    )
    share.write_json(job.paths.status, ended.to_dict())
    return JobState.TERMINATED
