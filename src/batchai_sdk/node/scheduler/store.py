"""What the scheduler keeps on the head node's own disk, never the share: its state folder with
``cluster.json`` (the cluster's configuration, as the last request carried it), ``sched.db`` (the queue in
SQLite: the jobs table and its migration from older schedulers' databases) and ``jobs/<id>/`` (a job's
assignment, secrets, launcher log and result). ``Store`` owns that folder; the names and states its
queries share are here too. SQLite stays off the share: its locking is unreliable on SMB/NFS.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..common import load_or_none, now, write_json_atomic
from ..protocol import SECRETS_RECORD
from .api import RequestError, check_cluster
from .log import log

ACTIVE = ("queued", "running", "cleaning")
# the phase of a running job whose launcher is being started: its tag is recorded, its pid not yet
STARTING = "starting"

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL, experiment TEXT NOT NULL, name TEXT NOT NULL,
  request_id TEXT UNIQUE,
  node_count INTEGER NOT NULL, wall REAL,
  state TEXT NOT NULL,
  creation_time TEXT, start_time TEXT, end_time TEXT,
  started REAL,
  nodes TEXT NOT NULL DEFAULT '[]',
  tag TEXT, attempt INTEGER NOT NULL DEFAULT 0,
  launcher_pid INTEGER, phase TEXT,
  exit_code INTEGER, reason TEXT,
  stop_state TEXT, stop_reason TEXT, stop_sent REAL,
  published INTEGER NOT NULL DEFAULT 0, beat REAL NOT NULL DEFAULT 0,
  hang REAL, max_retries INTEGER NOT NULL DEFAULT 0, retry_codes TEXT NOT NULL DEFAULT '[]',
  attempts TEXT NOT NULL DEFAULT '[]', stdouterr TEXT, stop_cause TEXT, max_cost REAL, price REAL,
  priority INTEGER NOT NULL DEFAULT 0,
  hang_notice REAL, notice TEXT, request_digest TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS one_active_run ON jobs(key)
  WHERE state IN ('queued', 'running', 'cleaning');
"""


ADDED_COLUMNS = {  # columns later versions added: a database an older scheduler made gets them
    "hang": "REAL",
    "max_retries": "INTEGER NOT NULL DEFAULT 0",
    "retry_codes": "TEXT NOT NULL DEFAULT '[]'",
    "attempts": "TEXT NOT NULL DEFAULT '[]'",
    "stdouterr": "TEXT",
    "stop_cause": "TEXT",
    "max_cost": "REAL",
    "price": "REAL",
    "priority": "INTEGER NOT NULL DEFAULT 0",
    "hang_notice": "REAL",  # observe mode: seconds of silence before the status says "possibly hung"
    "notice": "TEXT",  # that note, published in status.json until the job writes again
    "request_digest": "TEXT",  # what the request_id named: a replay with other content is refused
}


def migrate(db: sqlite3.Connection) -> None:
    """Add the columns a database an older scheduler made lacks."""
    have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    for name, decl in ADDED_COLUMNS.items():
        if name not in have:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {decl}")


def iso(ts: float) -> str:
    """A POSIX time as ISO 8601 in UTC, as the records on the share have it."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


class Store:
    """The head node's state folder: the cluster's configuration, the jobs table and each job's folder."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.cfg: dict[str, Any] = {}
        try:
            self.cfg = check_cluster(load_or_none(os.path.join(state_dir, "cluster.json")) or {})
        except RequestError as exc:  # written by an older ctl that did not check it: the next request's
            log(f"ignoring cluster.json: {exc}")  # configuration replaces it
        self.created = not os.path.exists(os.path.join(state_dir, "sched.db"))  # a new (or lost) database
        self.db = connect(os.path.join(state_dir, "sched.db"), fresh=self.created)
        self.db.executescript(SCHEMA)
        migrate(self.db)
        self.db.execute("CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state)")

    def save_cluster(self, cfg: dict[str, Any]) -> bool:
        """Keep the configuration a request carried (``cluster.json``); False when it is the same."""
        if cfg == self.cfg:
            return False
        self.cfg = cfg
        write_json_atomic(os.path.join(self.state_dir, "cluster.json"), cfg, sync=False)
        return True

    def retire(self) -> None:
        """Set the database aside (its scheduler stepped down: head.py): a scheduler started here later
        rebuilds the queue from the share, as after a lost database, instead of replaying this one."""
        self.db.close()
        stamp = f"stepped-down-{os.getpid()}"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                path = os.path.join(self.state_dir, f"sched.db{suffix}")
                os.replace(path, f"{path}.{stamp}")

    def removed(self) -> bool:
        """Whether the state folder's database was removed under this process (the scheduler exits)."""
        return not os.path.exists(os.path.join(self.state_dir, "sched.db"))

    def job_state_dir(self, job_id: int) -> str:
        """The job's folder on this node: assignment, secrets, the launcher's result and log."""
        return os.path.join(self.state_dir, "jobs", str(job_id))

    def rows(self, where: str, *args: Any) -> list[sqlite3.Row]:
        """The jobs matching ``where`` (a literal clause; values in ``args``), oldest first."""
        # ``where`` is always one of the scheduler's literal clauses; values go through parameters
        return list(self.db.execute(f"SELECT * FROM jobs WHERE {where} ORDER BY id", args))  # noqa: S608

    def active_brief(self) -> list[sqlite3.Row]:
        """The queued, running and cleaning jobs' id, key, state, nodes and phase, and what the queue's
        order and estimates use (node count, wall clock limit, priority, start), oldest first: what holds
        nodes and what waits, read on every change (whole rows cost 4x as much: 2.9 against 0.8 ms for a
        queue of 1,000, most of a submit's time with one that long)."""
        return list(
            self.db.execute(
                "SELECT id, key, state, nodes, phase, node_count, wall, priority, started"  # noqa: S608
                f" FROM jobs WHERE state IN {ACTIVE} ORDER BY id"
            )
        )

    def update(self, job_id: int, **fields: Any) -> None:
        """Set a job's columns; it is published again unless ``published`` is given."""
        fields.setdefault("published", 0)
        names = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE jobs SET {names} WHERE id = ?", (*fields.values(), job_id))  # noqa: S608

    def held(self, rows: Sequence[sqlite3.Row] | None = None) -> dict[str, tuple[int, str]]:
        """node id → (job id, phase) for every node a job holds (running or being cleaned up). ``rows``:
        the jobs to look at, where the caller has read them already (rows in other states are passed over)."""
        out: dict[str, tuple[int, str]] = {}
        if rows is None:
            rows = self.rows("state IN ('running', 'cleaning')")
        for row in rows:
            if row["state"] not in ("running", "cleaning"):
                continue
            phase = "cleaning" if row["state"] == "cleaning" else (row["phase"] or "preparing")
            phase = "preparing" if phase == STARTING else phase
            for node in json.loads(row["nodes"]):
                out[node] = (row["id"], phase)
        return out

    def finish(self, row: sqlite3.Row, state: str, exit_code: int | None, reason: str | None) -> None:
        """End the job for good and drop its secrets."""
        self.update(row["id"], state=state, exit_code=exit_code, reason=reason, end_time=now(), phase=None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.job_state_dir(row["id"]), SECRETS_RECORD))
        log(f"{row['key']} {state}" + (f": {reason}" if reason else ""))

    def busy(self) -> bool:
        """Whether a job is queued, running, being cleaned up or not yet published."""
        found = self.db.execute(
            "SELECT 1 FROM jobs WHERE state IN ('queued', 'running', 'cleaning') OR published = 0 LIMIT 1"
        )
        return found.fetchone() is not None


def connect(path: str, *, fresh: bool) -> sqlite3.Connection:
    """The scheduler's database, in autocommit mode with rows as ``sqlite3.Row``.

    Write-ahead log with ``synchronous=NORMAL``: a commit is an append to the log, not an fsync (each
    fsync cost 1 to 20 ms of a submit's answer and of a hand-off, and a hand-off commits about eight
    times). A commit survives a kill -9 of the scheduler, the case the invariants are about; one lost to a
    power cut of the head node goes with the processes it described. A ``fresh`` database's stale log,
    left by a scheduler killed after its database was removed, is removed first: SQLite would replay it
    into the new file.
    """
    if fresh:
        for stale in (path + "-wal", path + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
    db = sqlite3.connect(path, isolation_level=None)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db
