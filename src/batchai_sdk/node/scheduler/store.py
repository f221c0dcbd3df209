"""What the scheduler keeps on the head node's own disk, never the share: its state folder with
``cluster.json`` (the cluster's configuration, as the last request carried it), ``sched.db`` (the queue in
SQLite: the jobs table, the quarantine table of rows no code path could work with, and the migration from
older schedulers' databases) and ``jobs/<id>/`` (a job's assignment, secrets, launcher log and result).
``Store`` owns that folder and every SQL statement: its callers read and change jobs through its named
methods, never a clause of their own; the names and states its queries share are here too. SQLite stays
off the share: its locking is unreliable on SMB/NFS.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from ..common import load_or_none, now, write_json_atomic
from ..protocol.cluster import ClusterConfig, check_cluster
from ..protocol.fields import RequestError
from ..protocol.paths import SECRETS_RECORD
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
CREATE TABLE IF NOT EXISTS quarantine (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, row TEXT NOT NULL, reason TEXT NOT NULL, time TEXT
);
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


@dataclass(frozen=True)
class Failed:
    """A job that ends ``failed`` as its row is made: one queued with secrets that were kept only in a
    lost database, or one whose row was quarantined."""

    experiment: str
    name: str
    reason: str
    node_count: int = 1
    creation_time: str | None = None


@dataclass(frozen=True)
class Fenced:
    """A job whose processes may still run, without a launcher to watch them (its database was lost, or
    its row quarantined): ``cleaning`` with its tag on its nodes, held until every process with the tag is
    ended; its attempt ended with ``cause`` and ``detail`` (attempt_end concludes it). The settings a
    requeue keeps default to the table's own defaults."""

    experiment: str
    name: str
    tag: str | None
    nodes: list[str]
    cause: str
    detail: str | None  # the launcher's reason, where it left one
    creation_time: str | None
    start_time: str | None
    started: float
    node_count: int = 1
    wall: float | None = None
    attempt: int = 0
    exit_code: int | None = None
    hang: float | None = None
    hang_notice: float | None = None
    max_retries: int = 0
    retry_codes: list[int] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    stdouterr: str | None = None
    priority: int = 0


class JobExists(Exception):
    """A job of that name is already queued, running or being cleaned up (one active run per name)."""


class Store:
    """The head node's state folder: the cluster's configuration, the jobs table and each job's folder.

    Every statement the scheduler runs on ``sched.db`` is one of the methods below, named for what it
    reads or changes (as SkyPilot's ``sky/skylet/job_lib.py`` names each of its queries); a change of
    several statements that must happen together (a submit, a quarantine) is one method, one transaction.
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.cfg: ClusterConfig = cast(ClusterConfig, {})  # none yet: the first request's replaces it
        try:
            self.cfg = check_cluster(load_or_none(os.path.join(state_dir, "cluster.json")) or {})
        except RequestError as exc:  # written by an older ctl that did not check it: the next request's
            log(f"ignoring cluster.json: {exc}")  # configuration replaces it
        self.created = not os.path.exists(os.path.join(state_dir, "sched.db"))  # a new (or lost) database
        self._db = connect(os.path.join(state_dir, "sched.db"), fresh=self.created)
        self._db.executescript(SCHEMA)
        migrate(self._db)
        self._db.execute("CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state)")

    def save_cluster(self, cfg: ClusterConfig) -> bool:
        """Keep the configuration a request carried (``cluster.json``); False when it is the same."""
        if cfg == self.cfg:
            return False
        self.cfg = cfg
        write_json_atomic(os.path.join(self.state_dir, "cluster.json"), cfg, sync=False)
        return True

    def retire(self) -> None:
        """Set the database aside (its scheduler stepped down: head.py): a scheduler started here later
        rebuilds the queue from the share, as after a lost database, instead of replaying this one."""
        self._db.close()
        stamp = f"stepped-down-{os.getpid()}"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(OSError):
                path = os.path.join(self.state_dir, f"sched.db{suffix}")
                os.replace(path, f"{path}.{stamp}")

    def removed(self) -> bool:
        """Whether the state folder's database was removed under this process (the scheduler exits)."""
        return not os.path.exists(os.path.join(self.state_dir, "sched.db"))

    def close(self) -> None:
        """Let the database go (a scheduler that ends; the next one opens it again)."""
        self._db.close()

    def job_state_dir(self, job_id: int) -> str:
        """The job's folder on this node: assignment, secrets, the launcher's result and log."""
        return os.path.join(self.state_dir, "jobs", str(job_id))

    # -- reads ----------------------------------------------------------------------------------------
    def _rows(self, where: str, *args: Any) -> list[sqlite3.Row]:
        """The jobs matching ``where`` (one of this class's literal clauses; values in ``args``), oldest
        first."""
        return list(self._db.execute(f"SELECT * FROM jobs WHERE {where} ORDER BY id", args))  # noqa: S608

    def job(self, job_id: int) -> sqlite3.Row:
        """The job's row; ``LookupError`` when it has none (quarantined, pruned)."""
        found = self._rows("id = ?", job_id)
        if not found:
            raise LookupError(f"the jobs table has no job {job_id}")
        return found[0]

    def jobs(self, *states: str) -> list[sqlite3.Row]:
        """The jobs in ``states`` (every job when none is named), oldest first."""
        if not states:
            return self._rows("1 = 1")
        return self._rows(f"state IN ({', '.join('?' for _ in states)})", *states)

    def runs(self, key: str) -> list[sqlite3.Row]:
        """Every row of the job ``experiment/name`` (one per time it was submitted and kept), oldest first."""
        return self._rows("key = ?", key)

    def active_run(self, key: str) -> sqlite3.Row | None:
        """The job's run that is queued, running or being cleaned up (at most one: ``one_active_run``)."""
        found = self._rows(f"key = ? AND state IN {ACTIVE}", key)
        return found[0] if found else None

    def by_request(self, request_id: str) -> sqlite3.Row | None:
        """The job a submit with this ``request_id`` queued, if one did."""
        found = self._rows("request_id = ?", request_id)
        return found[0] if found else None

    def active_brief(self) -> list[sqlite3.Row]:
        """The queued, running and cleaning jobs' id, key, state, nodes and phase, and what the queue's
        order and estimates use (node count, wall clock limit, priority, start), oldest first: what holds
        nodes and what waits, read on every change (whole rows cost 4x as much: 2.9 against 0.8 ms for a
        queue of 1,000, most of a submit's time with one that long)."""
        return list(
            self._db.execute(
                "SELECT id, key, state, nodes, phase, node_count, wall, priority, started"  # noqa: S608
                f" FROM jobs WHERE state IN {ACTIVE} ORDER BY id"
            )
        )

    def queue_head(self) -> sqlite3.Row | None:
        """The experiment and name of the queued job that starts next (highest priority, then oldest)."""
        found: sqlite3.Row | None = self._db.execute(
            "SELECT experiment, name FROM jobs WHERE state = 'queued' ORDER BY priority DESC, id LIMIT 1"
        ).fetchone()
        return found

    def due_to_publish(self, beat_before: float) -> list[sqlite3.Row]:
        """The jobs whose status.json is behind their row, and the running or cleaning ones whose last
        heartbeat is older than ``beat_before``, oldest first."""
        return self._rows("published = 0 OR (state IN ('running', 'cleaning') AND beat < ?)", beat_before)

    def ended(self) -> list[sqlite3.Row]:
        """The ended jobs' id, end time and whether they are published, the last to end first."""
        return list(
            self._db.execute(
                "SELECT id, end_time, published FROM jobs"
                " WHERE state IN ('succeeded', 'failed', 'terminated') ORDER BY end_time DESC, id DESC"
            )
        )

    def last_end(self) -> str | None:
        """When the last job ended (ISO 8601), None when none has."""
        found: str | None = self._db.execute("SELECT MAX(end_time) FROM jobs").fetchone()[0]
        return found

    def changes(self) -> int:
        """A count of the rows changed since the database was opened: the same count, nothing changed."""
        return self._db.total_changes

    def held(self, rows: Sequence[sqlite3.Row] | None = None) -> dict[str, tuple[int, str]]:
        """node id → (job id, phase) for every node a job holds (running or being cleaned up). ``rows``:
        the jobs to look at, where the caller has read them already (rows in other states are passed over)."""
        out: dict[str, tuple[int, str]] = {}
        if rows is None:
            rows = self._rows("state IN ('running', 'cleaning')")
        for row in rows:
            if row["state"] not in ("running", "cleaning"):
                continue
            phase = "cleaning" if row["state"] == "cleaning" else (row["phase"] or "preparing")
            phase = "preparing" if phase == STARTING else phase
            for node in json.loads(row["nodes"]):
                out[node] = (row["id"], phase)
        return out

    def busy(self) -> bool:
        """Whether a job is queued, running, being cleaned up or not yet published."""
        found = self._db.execute(
            "SELECT 1 FROM jobs WHERE state IN ('queued', 'running', 'cleaning') OR published = 0 LIMIT 1"
        )
        return found.fetchone() is not None

    # -- changes --------------------------------------------------------------------------------------
    def add_job(
        self,
        *,
        experiment: str,
        name: str,
        node_count: int,
        request_id: str,
        request_digest: str,
        secrets: dict[str, str] | None = None,
        wall: float | None = None,
        creation_time: str | None = None,
        hang: float | None = None,
        hang_notice: float | None = None,
        max_retries: int = 0,
        retry_codes: Sequence[int] = (),
        max_cost: float | None = None,
        price: float | None = None,
        priority: int = 0,
    ) -> int:
        """Queue a submitted job; returns its id. Its row, its folder and its secrets (0600, this node
        only) are made together, or none of them: a failure rolls the row back. A queued row rebuilt from
        the share for the same name (no request id: it was found there when this scheduler started) is
        the one this submit replaces. ``JobExists`` when a run of that name is queued or running."""
        key = f"{experiment}/{name}"
        self._db.execute("SAVEPOINT submit")
        try:
            rebuilt = self._rows("key = ? AND state = 'queued' AND request_id IS NULL", key)
            if rebuilt:
                self._db.execute("DELETE FROM jobs WHERE id = ?", (rebuilt[0]["id"],))
            cur = self._db.execute(
                "INSERT INTO jobs (key, experiment, name, request_id, node_count, wall, state, creation_time,"
                " hang, max_retries, retry_codes, max_cost, price, priority, hang_notice, request_digest)"
                " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    experiment,
                    name,
                    request_id,
                    node_count,
                    wall,
                    creation_time,
                    hang,
                    max_retries,
                    json.dumps(list(retry_codes)),
                    max_cost,
                    price,
                    priority,
                    hang_notice,
                    request_digest,
                ),
            )
            job_id = int(cur.lastrowid or 0)
            os.makedirs(self.job_state_dir(job_id), mode=0o700, exist_ok=True)
            if secrets:
                path = os.path.join(self.job_state_dir(job_id), SECRETS_RECORD)
                write_json_atomic(path, secrets, mode=0o600)
        except BaseException as exc:
            self._db.execute("ROLLBACK TO submit")
            self._db.execute("RELEASE submit")
            if isinstance(exc, sqlite3.IntegrityError):
                raise JobExists(f"job {key} is already queued or running") from exc
            raise
        self._db.execute("RELEASE submit")
        return job_id

    def add_rebuilt(
        self,
        experiment: str,
        name: str,
        node_count: int,
        wall: float | None,
        creation_time: str | None,
        priority: int,
    ) -> None:
        """Queue again a job the share says was queued when the database was lost (no request id: the
        submit that wrote its record, if still in flight, adopts the row, ``add_job``)."""
        self._db.execute(
            "INSERT INTO jobs (key, experiment, name, node_count, wall, state, creation_time,"
            " priority) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?)",
            (f"{experiment}/{name}", experiment, name, node_count, wall, creation_time, priority),
        )

    def add_failed(self, job: Failed) -> None:
        """Record ``job`` as failed now."""
        self._insert_failed(job)

    def add_fenced(self, job: Fenced) -> None:
        """Record ``job`` as being cleaned up: its nodes are held until its processes are ended."""
        self._insert_fenced(job)

    def number_after(self, last_id: int) -> None:
        """New jobs get ids above ``last_id``: their folders are never a lost database's jobs' folders."""
        self._db.execute("DELETE FROM sqlite_sequence WHERE name = 'jobs'")
        self._db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('jobs', ?)", (last_id,))

    def update(self, job_id: int, **fields: Any) -> None:
        """Set a job's columns; it is published again unless ``published`` is given."""
        fields.setdefault("published", 0)
        names = ", ".join(f"{k} = ?" for k in fields)
        self._db.execute(f"UPDATE jobs SET {names} WHERE id = ?", (*fields.values(), job_id))  # noqa: S608

    def mark_published(self, job_id: int, beat: float) -> None:
        """The job's status.json shows its row now (or its folder is gone from the share), as of ``beat``."""
        self._db.execute("UPDATE jobs SET published = 1, beat = ? WHERE id = ?", (beat, job_id))

    def finish(self, row: sqlite3.Row, state: str, exit_code: int | None, reason: str | None) -> None:
        """End the job for good and drop its secrets."""
        self.update(row["id"], state=state, exit_code=exit_code, reason=reason, end_time=now(), phase=None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.job_state_dir(row["id"]), SECRETS_RECORD))
        log(f"{row['key']} {state}" + (f": {reason}" if reason else ""))

    def forget(self, job_id: int) -> None:
        """Drop an ended job's row (its folder went first, prune.py)."""
        self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def quarantine(self, row: sqlite3.Row, reason: str, replacement: Failed | Fenced | None) -> None:
        """Move ``row`` to the ``quarantine`` table with ``reason`` (kept as it was, JSON) and put
        ``replacement`` in its place, in one transaction: readers never see the job vanish or twice."""
        data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row iterates over values
        self._db.execute("SAVEPOINT quarantine")
        try:
            self._db.execute(
                "INSERT INTO quarantine (job_id, row, reason, time) VALUES (?, ?, ?, ?)",
                (data.get("id"), json.dumps(data, default=repr), reason, now()),
            )
            self._db.execute("DELETE FROM jobs WHERE id = ?", (data.get("id"),))
            if isinstance(replacement, Fenced):
                self._insert_fenced(replacement)
            elif isinstance(replacement, Failed):
                self._insert_failed(replacement)
        except BaseException:
            self._db.execute("ROLLBACK TO quarantine")
            self._db.execute("RELEASE quarantine")
            raise
        self._db.execute("RELEASE quarantine")

    def rollback(self) -> None:
        """Undo what a step or request that failed midway left uncommitted (a savepoint not released)."""
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _insert_failed(self, job: Failed) -> None:
        self._db.execute(
            "INSERT INTO jobs (key, experiment, name, node_count, state, creation_time, end_time, reason)"
            " VALUES (?, ?, ?, ?, 'failed', ?, ?, ?)",
            (
                f"{job.experiment}/{job.name}",
                job.experiment,
                job.name,
                job.node_count,
                job.creation_time,
                now(),
                job.reason,
            ),
        )

    def _insert_fenced(self, job: Fenced) -> None:
        self._db.execute(
            "INSERT INTO jobs (key, experiment, name, node_count, wall, state, creation_time, start_time,"
            " started, nodes, tag, attempt, exit_code, reason, hang, hang_notice, max_retries, retry_codes,"
            " attempts, stdouterr, priority)"
            " VALUES (?, ?, ?, ?, ?, 'cleaning', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                f"{job.experiment}/{job.name}",
                job.experiment,
                job.name,
                job.node_count,
                job.wall,
                job.creation_time,
                job.start_time,
                job.started,
                json.dumps(job.nodes),
                job.tag,
                job.attempt,
                job.exit_code,
                json.dumps([job.cause, job.detail]),
                job.hang,
                job.hang_notice,
                job.max_retries,
                json.dumps(job.retry_codes),
                json.dumps(job.attempts),
                job.stdouterr,
                job.priority,
            ),
        )


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
