"""What readers see: the scheduler writes each job's ``status.json`` and the cluster's ``nodes.json`` to
the share. A job's record is written when it changes, and again every heartbeat while the job runs; the
queue's heartbeat is ``nodes.json``'s, written every heartbeat, so a thousand queued jobs are not a
thousand writes (readers take it for a queued job, ``head_scheduler.with_cluster_heartbeat``). Nothing is
read from the database while nothing changed and no heartbeat is due. A failed write is kept and retried.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..common import now, write_json_atomic
from ..protocol import HEAD_DISK_ERROR, HEARTBEAT_KEY, NODES_RECORD, NodeHold, NodesDoc, Reporter, StatusDoc
from .store import ACTIVE, STARTING

if TYPE_CHECKING:
    from .daemon import Scheduler

HEARTBEAT = 10.0


def status_doc(sched: Scheduler, row: sqlite3.Row) -> dict[str, Any]:
    """The job's ``status.json`` as readers see it (a job being cleaned up is still running)."""
    state = "running" if row["state"] == "cleaning" else row["state"]
    doc = StatusDoc(
        state=state,
        creation_time=row["creation_time"],
        heartbeat=now(),
        reporter=Reporter(host=socket.gethostname(), pid=os.getpid(), job_id=row["id"]),
    )
    if row["start_time"]:
        doc = replace(
            doc,
            start_time=row["start_time"],
            nodes=json.loads(row["nodes"]),
            preparing=state == "running" and row["phase"] in ("preparing", STARTING),
            attempt=row["attempt"],
            tag=row["tag"] if state == "running" else None,
        )
    attempts = json.loads(row["attempts"])
    if attempts:
        doc = replace(doc, attempts=attempts, attempt=row["attempt"])
    if state == "queued" and attempts:
        doc = replace(doc, requeue_reason=row["reason"])
    if state == "running" and row["notice"]:
        doc = replace(doc, notice=row["notice"])  # observe mode's "possibly hung": the job goes on
    if state not in ("queued", "running"):
        doc = replace(doc, end_time=row["end_time"], exit_code=row["exit_code"], failure_reason=row["reason"])
    return doc.to_dict()


def report_fault(sched: Scheduler, message: str | None) -> None:
    """Say on the share (``nodes.json``) that the head node's disk refuses writes, or that it is over."""
    sched.fault_message = message
    doc = dict(sched.last_nodes_doc or {})
    if message is None:
        doc.pop(HEAD_DISK_ERROR, None)
    else:
        doc[HEAD_DISK_ERROR] = message
    with contextlib.suppress(OSError):
        write_json_atomic(os.path.join(sched.cfg["cluster_dir"], NODES_RECORD), doc, sync=False)
        sched.last_nodes_doc = doc


def deleted(sched: Scheduler, row: sqlite3.Row) -> bool:
    """Whether the job's folder was removed from a share that is there (nothing to publish to)."""
    jobs = sched.share_paths().jobs_dir(row["experiment"])
    return os.path.isdir(jobs) and not os.path.exists(sched.job_share_dir(row["experiment"], row["name"]))


def note_publish_error(sched: Scheduler, row: sqlite3.Row, path: str, exc: OSError) -> None:
    """Log a failed write once per distinct error; it is retried on the next pass."""
    if sched.publish_errors.get(row["key"]) != str(exc):
        sched.log(f"cannot write {path} yet ({exc}); the outcome is kept here and retried")
        sched.publish_errors[row["key"]] = str(exc)


def observed(sched: Scheduler) -> tuple[object, ...]:
    """What publish's records are made of, short of reading the jobs: unchanged, nothing is written."""
    gate = sched.gate
    return (
        sched.db.total_changes,
        tuple(sched.down.ids()),
        tuple(sorted(gate.unusable.items())),
        tuple(sorted(gate.checking)),
        gate.applied,
        sched.fault_message,
    )


def publish(sched: Scheduler) -> None:
    """Write changed job records and node assignments to the share; a failed write is retried later."""
    t = time.time()
    unchanged = observed(sched)
    if unchanged == sched.published_as and not sched.publish_errors and t < sched.next_beat:
        return
    beat = t >= sched.next_beat
    if beat:
        sched.next_beat = t + HEARTBEAT
    # Node assignments first: a reader that sees a job's end then sees its nodes free as well.
    held = sched.held()
    keys = {r["id"]: r["key"] for r in sched.rows(f"state IN {ACTIVE}")}
    queued = [r["key"] for r in sched.rows("state = 'queued'")]
    # no job held or queued: idle since the last job's end (None: none ended yet), for "is it forgotten?"
    last_end = None if held or queued else sched.db.execute("SELECT MAX(end_time) FROM jobs").fetchone()[0]
    doc = NodesDoc(
        nodes={node: NodeHold(keys.get(jid, ""), phase) for node, (jid, phase) in held.items()},
        queued=queued,
        down=sched.down.ids(),
        unusable=dict(sorted(sched.gate.unusable.items())),
        checking=sorted(sched.gate.checking),
        health_reports=sched.gate.applied,
        idle_since=last_end,
        head_disk_error=sched.fault_message,
    ).to_dict()
    if doc != sched.last_nodes_doc or beat:
        try:
            path = os.path.join(sched.cfg["cluster_dir"], NODES_RECORD)
            write_json_atomic(path, {**doc, HEARTBEAT_KEY: now()}, sync=False)
            sched.last_nodes_doc = doc
        except OSError:
            pass
    due = sched.rows("published = 0 OR (state IN ('running', 'cleaning') AND beat < ?)", t - HEARTBEAT / 2)
    for row in due:
        path = sched.share_paths().status_record(row["experiment"], row["name"])
        try:  # a change is made durable; a running job's heartbeat alone need not be
            write_json_atomic(path, status_doc(sched, row), sync=not row["published"])
        except FileNotFoundError as exc:
            if deleted(sched, row):  # the job's folder was removed from a share that is there
                sched.db.execute("UPDATE jobs SET published = 1, beat = ? WHERE id = ?", (t, row["id"]))
                continue
            note_publish_error(sched, row, path, exc)
            continue
        except OSError as exc:
            note_publish_error(sched, row, path, exc)
            continue
        sched.publish_errors.pop(row["key"], None)
        sched.db.execute("UPDATE jobs SET published = 1, beat = ? WHERE id = ?", (t, row["id"]))
    sched.published_as = observed(sched)
