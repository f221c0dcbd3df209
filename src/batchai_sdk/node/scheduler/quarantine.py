"""Rows of ``sched.db`` no code path can work with (a value an older scheduler or a bug let in) are moved
to the ``quarantine`` table with the reason, instead of failing the loop on every pass and every restart.
The job itself ends ``failed`` with that reason (its record on the share says so), and its name is free.
A job that was running is fenced as after a lost database: its row becomes ``cleaning`` with its tag and
nodes (every node, when the row does not say which), so its nodes are held until every process with its
tag is found and ended; only then does it end ``failed`` and its nodes take other jobs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..common import now
from ..policy import retries
from .api import NAME, NODE_ID, check_row
from .log import log

SCHEMA = """
CREATE TABLE IF NOT EXISTS quarantine (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, row TEXT NOT NULL, reason TEXT NOT NULL, time TEXT
);
"""


def quarantine_bad_rows(db: sqlite3.Connection, all_nodes: Sequence[str] = ()) -> int:
    """Move every row ``check_row`` refuses to the quarantine; returns how many. ``all_nodes``: the
    cluster's nodes, held for a running job whose row does not say which nodes it has."""
    db.executescript(SCHEMA)
    moved = 0
    for row in db.execute("SELECT * FROM jobs").fetchall():
        reason = check_row(row)
        if reason is not None:
            quarantine(db, row, reason, all_nodes)
            moved += 1
    return moved


def _nodes(value: object, all_nodes: Sequence[str]) -> list[str]:
    try:
        nodes = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        nodes = None
    if isinstance(nodes, list) and nodes and all(isinstance(n, str) and NODE_ID.match(n) for n in nodes):
        return nodes
    return list(all_nodes)


def quarantine(db: sqlite3.Connection, row: sqlite3.Row, reason: str, all_nodes: Sequence[str] = ()) -> None:
    """Keep the row as it was (JSON) with ``reason``; what readers see becomes a failed job (a running
    one once its processes are ended: fenced, ``cleaning`` until then)."""
    data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row iterates over values
    tag = data.get("tag")
    running = data.get("state") in ("running", "cleaning") and isinstance(tag, str) and tag
    db.execute("SAVEPOINT quarantine")
    try:
        db.execute(
            "INSERT INTO quarantine (job_id, row, reason, time) VALUES (?, ?, ?, ?)",
            (data.get("id"), json.dumps(data, default=repr), reason, now()),
        )
        db.execute("DELETE FROM jobs WHERE id = ?", (data.get("id"),))
        exp, name = data.get("experiment"), data.get("name")
        valid = isinstance(exp, str) and isinstance(name, str) and NAME.match(exp) and NAME.match(name)
        if running:  # its processes may run on: fenced, its nodes held until they are ended
            why = (
                f"the scheduler quarantined the job's record ({reason}); every process of the job was ended"
                " before its nodes were used again; submit it again"
            )
            db.execute(
                "INSERT INTO jobs (key, experiment, name, node_count, state, creation_time, start_time,"
                " started, nodes, tag, reason) VALUES (?, ?, ?, 1, 'cleaning', ?, ?, ?, ?, ?, ?)",
                (
                    f"{exp}/{name}" if valid else f"quarantined/job-{data.get('id')}",
                    exp if valid else "quarantined",
                    name if valid else f"job-{data.get('id')}",
                    data.get("creation_time") if isinstance(data.get("creation_time"), str) else None,
                    data.get("start_time") if isinstance(data.get("start_time"), str) else None,
                    0.0,
                    json.dumps(_nodes(data.get("nodes"), all_nodes)),
                    tag,
                    json.dumps([retries.EndCause.EXIT.value, why]),
                ),
            )
        elif valid:
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
