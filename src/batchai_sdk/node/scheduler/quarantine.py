"""Rows of ``sched.db`` no code path can work with (a value an older scheduler or a bug let in) are moved
to the ``quarantine`` table with the reason, instead of failing the loop on every pass and every restart.
The job itself ends ``failed`` with that reason (its record on the share says so), and its name is free."""

from __future__ import annotations

import json
import sqlite3

from ..common import now
from .api import NAME, check_row
from .log import log

SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, row TEXT NOT NULL, reason TEXT NOT NULL, time TEXT
);
"""


def quarantine_bad_rows(db: sqlite3.Connection) -> int:
    """Move every row ``check_row`` refuses to the quarantine; returns how many."""
    db.executescript(SCHEMA)
    moved = 0
    for row in db.execute("SELECT * FROM jobs").fetchall():
        reason = check_row(row)
        if reason is not None:
            quarantine(db, row, reason)
            moved += 1
    return moved


def quarantine(db: sqlite3.Connection, row: sqlite3.Row, reason: str) -> None:
    """Keep the row as it was (JSON) with ``reason``; what readers see becomes a failed job."""
    data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row iterates over values
    db.execute("SAVEPOINT quarantine")
    try:
        db.execute(
            "INSERT INTO quarantine (job_id, row, reason, time) VALUES (?, ?, ?, ?)",
            (data.get("id"), json.dumps(data, default=repr), reason, now()),
        )
        db.execute("DELETE FROM jobs WHERE id = ?", (data.get("id"),))
        exp, name = data.get("experiment"), data.get("name")
        if isinstance(exp, str) and isinstance(name, str) and NAME.match(exp) and NAME.match(name):
            db.execute(
                "INSERT INTO jobs (key, experiment, name, node_count, state, creation_time, end_time, reason)"
                " VALUES (?, ?, ?, 1, 'failed', ?, ?, ?)",
                (
                    f"{exp}/{name}",
                    exp,
                    name,
                    data.get("creation_time") if isinstance(data.get("creation_time"), str) else None,
                    now(),
                    f"the scheduler quarantined the job's record ({reason}); submit it again",
                ),
            )
    except BaseException:
        db.execute("ROLLBACK TO quarantine")
        db.execute("RELEASE quarantine")
        raise
    db.execute("RELEASE quarantine")
    log(f"quarantined job row {data.get('id')}: {reason}")
