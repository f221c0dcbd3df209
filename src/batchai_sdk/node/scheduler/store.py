"""The scheduler's queue in SQLite: the jobs table, its migration from older schedulers' databases, and
the names and states its queries share. The database lives on the head node's own disk, never the share."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import datetime, timezone

from ..names import NAME as NAME  # job and experiment names (names.py spells them once)

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
  hang_notice REAL, notice TEXT
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
