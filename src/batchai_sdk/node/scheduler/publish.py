"""What readers see: the scheduler writes each job's ``status.json`` and the cluster's ``nodes.json`` to
the share. A job's record is written when it changes, and again every heartbeat while the job runs; the
queue's heartbeat is ``nodes.json``'s, written every heartbeat, so a thousand queued jobs are not a
thousand writes (readers take it for a queued job, ``head_scheduler.with_cluster_heartbeat``). Nothing is
read from the database while nothing changed and no heartbeat is due. A failed write is kept and retried.

``Publisher`` owns what it last wrote and when (the nodes' record, the heartbeat, the failed writes, the
head node's disk fault while it lasts); it is given the store, the cluster, the down nodes and the health
gate, whose states ``nodes.json`` shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import replace
from typing import Any

from ..common import now, write_json_atomic
from ..policy import pending
from ..policy.queue import Waiting
from ..protocol.paths import NODES_RECORD
from ..protocol.records import (
    HEAD_DISK_ERROR,
    HEARTBEAT_KEY,
    NodeHold,
    NodesDoc,
    PendingDoc,
    Reporter,
    StatusDoc,
)
from .cluster import Cluster
from .gate import NodeGate
from .health import DownNodes
from .log import log
from .mount_waits import MountWaits
from .store import STARTING, Store

HEARTBEAT = 10.0


def status_doc(row: sqlite3.Row) -> dict[str, Any]:
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


class Publisher:
    def __init__(
        self,
        store: Store,
        cluster: Cluster,
        down: DownNodes,
        gate: NodeGate,
        mounts: MountWaits | None = None,
    ) -> None:
        self.store = store
        self.mounts = mounts if mounts is not None else MountWaits()
        self.cluster = cluster
        self.down = down
        self.gate = gate
        self.errors: dict[str, str] = {}  # job key → the error its record's last write met
        self.last_nodes_doc: Any = None
        self.published_as: tuple[object, ...] | None = None  # what the last publish saw
        self.next_beat = 0.0
        self.fault_message: str | None = None  # the head node's disk refusing writes, while it lasts
        self.pending_error: str | None = None  # why the pending reasons could not be made, logged once

    def publish(self) -> None:
        """Write changed job records and node assignments to the share; a failed write is retried later."""
        t = time.time()
        unchanged = self.observed()
        if unchanged == self.published_as and not self.errors and t < self.next_beat:
            return
        beat = t >= self.next_beat
        if beat:
            self.next_beat = t + HEARTBEAT
        paths = self.cluster.share_paths()
        # Node assignments first: a reader that sees a job's end then sees its nodes free as well.
        active = self.store.active_brief()  # read once: what holds nodes, and the queue
        held = self.store.held(active)
        keys = {r["id"]: r["key"] for r in active}
        queued = [r["key"] for r in active if r["state"] == "queued"]
        # no job held or queued: idle since the last job's end (None: none ended yet), for "is it forgotten?"
        last_end = None if held or queued else self.store.last_end()
        doc = NodesDoc(
            nodes={node: NodeHold(keys.get(jid, ""), phase) for node, (jid, phase) in held.items()},
            queued=queued,
            down=self.down.ids(),
            unusable=dict(sorted(self.gate.unusable.items())),
            checking=sorted(self.gate.checking),
            health_reports=self.gate.applied,
            idle_since=last_end,
            head_disk_error=self.fault_message,
            pending=self.pending_or_none(active, held) if queued else {},
        ).to_dict()
        if doc != self.last_nodes_doc or beat:
            try:
                path = os.path.join(self.cluster.cfg["cluster_dir"], NODES_RECORD)
                write_json_atomic(path, {**doc, HEARTBEAT_KEY: now()}, sync=False)
                self.last_nodes_doc = doc
            except OSError:
                pass
        for row in self.store.due_to_publish(t - HEARTBEAT / 2):
            path = paths.status_record(row["experiment"], row["name"])
            try:  # a change is made durable; a running job's heartbeat alone need not be
                write_json_atomic(path, status_doc(row), sync=not row["published"])
            except FileNotFoundError as exc:
                if self.deleted(row):  # the job's folder was removed from a share that is there
                    self.store.mark_published(row["id"], t)
                    continue
                self.note_error(row, path, exc)
                continue
            except OSError as exc:
                self.note_error(row, path, exc)
                continue
            self.errors.pop(row["key"], None)
            self.store.mark_published(row["id"], t)
        self.published_as = self.observed()

    def pending_or_none(
        self, active: list[sqlite3.Row], held: dict[str, tuple[int, str]]
    ) -> dict[str, PendingDoc]:
        """``pending``, or nothing (logged once) should it fail: a reason never stops a submit or a pass."""
        try:
            found = self.pending(active, held)
        except Exception as exc:
            if self.pending_error != repr(exc):
                self.pending_error = repr(exc)
                log(f"cannot tell why jobs wait: {exc!r}")
            return {}
        self.pending_error = None
        return found

    def pending(self, active: list[sqlite3.Row], held: dict[str, tuple[int, str]]) -> dict[str, PendingDoc]:
        """Why each queued job waits, and until when (``policy/pending.py``): published with the queue in
        ``nodes.json``, one write for the whole queue, rewritten only when a reason changes."""
        up = [n["id"] for n in self.cluster.nodes()]
        blocked = self.gate.blocked()
        free = [n for n in up if n not in held and n not in self.down and n not in blocked]
        settings = self.cluster.settings()
        nodes = pending.NodesNow(
            up=up,
            free=free,
            unusable=self.gate.unusable,
            down=self.down.ids(),
            checking=sorted(self.gate.checking),
            can_grow=max(0, min(settings.max_nodes, len(self.cluster.pool())) - len(up)) if settings else 0,
        )
        queued = [
            (r["key"], Waiting(r["id"], r["node_count"], r["wall"], r["priority"]))
            for r in active
            if r["state"] == "queued"
        ]
        running = [
            pending.Running(
                r["key"],
                len(json.loads(r["nodes"])),
                r["started"] + r["wall"] if r["wall"] and r["started"] else None,
            )
            for r in active
            if r["state"] != "queued"
        ]
        found = self.mounts.reasons()
        mounts = {
            r["key"]: pending.MountWait(self.mounts.node, found[r["id"]]) for r in active if r["id"] in found
        }
        return pending.explain(queued, running, nodes, mounts)

    def observed(self) -> tuple[object, ...]:
        """What publish's records are made of, short of reading the jobs: unchanged, nothing is written."""
        gate = self.gate
        return (
            self.store.changes(),
            tuple(self.down.ids()),
            tuple(sorted(gate.unusable.items())),
            tuple(sorted(gate.checking)),
            gate.applied,
            self.fault_message,
            self.mounts.observed(),
        )

    def report_fault(self, message: str | None) -> None:
        """Say on the share (``nodes.json``) that the head node's disk refuses writes, or that it is over."""
        self.fault_message = message
        doc = dict(self.last_nodes_doc or {})
        if message is None:
            doc.pop(HEAD_DISK_ERROR, None)
        else:
            doc[HEAD_DISK_ERROR] = message
        with contextlib.suppress(OSError):
            write_json_atomic(os.path.join(self.cluster.cfg["cluster_dir"], NODES_RECORD), doc, sync=False)
            self.last_nodes_doc = doc

    def deleted(self, row: sqlite3.Row) -> bool:
        """Whether the job's folder was removed from a share that is there (nothing to publish to)."""
        paths = self.cluster.share_paths()
        jobs = paths.jobs_dir(row["experiment"])
        return os.path.isdir(jobs) and not os.path.exists(paths.job_dir(row["experiment"], row["name"]))

    def note_error(self, row: sqlite3.Row, path: str, exc: OSError) -> None:
        """Log a failed write once per distinct error; it is retried on the next pass."""
        if self.errors.get(row["key"]) != str(exc):
            log(f"cannot write {path} yet ({exc}); the outcome is kept here and retried")
            self.errors[row["key"]] = str(exc)
