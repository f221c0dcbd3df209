"""The cluster's scheduler: one process per cluster, on its head node, the one authority over its queue.

It keeps the queue and the node assignments in SQLite in a node-local folder that only it opens (never
on the share: SQLite's locking is unreliable on SMB/NFS), takes requests on a Unix socket beside it
(``ctl``), starts one launcher per job attempt, watches it, ends every process of a job on every node
(by the job's tag, procs.py) before its nodes count as free, and publishes each job's status and the
nodes' assignments to the share for readers. It exits once nothing is queued, running or unpublished.

Queue order: first come, first served. A later job may start earlier (backfill) only when it cannot
delay the first waiting job: it fits on nodes free now and either ends (by its wall clock limit) before
the earliest time the first waiting job can start, or uses only nodes that job will not need then.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import selectors
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from . import autoscale, procs, retries, stacks, watchdog
from .common import TAG_VAR, load_or_none, now, write_json_atomic

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ACTIVE = ("queued", "running", "cleaning")
LOOP = 0.05
TERM_GRACE = 10.0  # the launcher's own grace for the ranks, plus a margin before it is killed
HEARTBEAT = 10.0
IDLE_EXIT = 2.0

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
  attempts TEXT NOT NULL DEFAULT '[]', stdouterr TEXT, stop_cause TEXT, max_cost REAL, price REAL
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
}


def migrate(db: sqlite3.Connection) -> None:
    have = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    for name, decl in ADDED_COLUMNS.items():
        if name not in have:
            db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {decl}")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


@dataclass(frozen=True)
class Waiting:
    job_id: int
    nodes: int
    wall: float | None  # the job's wall clock limit in seconds, if it has one


@dataclass(frozen=True)
class Holding:
    nodes: int
    ends_by: float | None  # when its wall clock limit ends it at the latest; None: unknown


def plan(queued: list[Waiting], running: list[Holding], free: int, now: float) -> list[tuple[int, int]]:
    """Which queued jobs start now, in queue order: (job id, node count).

    First come, first served: jobs start in order while they fit. The first job that does not fit gets a
    reservation — the earliest time enough nodes are free for it, from the running jobs' wall clock
    limits (never, if one has none) — and how many nodes are spare then. A later job may start before it
    (backfill) only if it fits now and either ends by its own wall clock limit before that time, or
    needs no more than the spare nodes: either way the first job starts no later than it would have.
    """
    starts: list[tuple[int, int]] = []
    shadow: float | None = None
    extra = 0
    ends = sorted((h.ends_by if h.ends_by is not None else float("inf"), h.nodes) for h in running)
    for job in queued:
        if shadow is None:
            if job.nodes <= free:
                starts.append((job.job_id, job.nodes))
                free -= job.nodes
                ends = sorted([*ends, (now + job.wall if job.wall else float("inf"), job.nodes)])
                continue
            shadow, extra = float("inf"), 0
            avail = free
            for end, count in ends:
                avail += count
                if avail >= job.nodes:
                    shadow, extra = end, avail - job.nodes
                    break
            continue
        if job.nodes > free:
            continue
        finish = now + job.wall if job.wall else float("inf")
        before = finish <= shadow and finish != float("inf")
        if before or job.nodes <= extra:
            if not before:
                extra -= job.nodes
            starts.append((job.job_id, job.nodes))
            free -= job.nodes
    return starts


class RequestError(Exception):
    """A request the scheduler refuses; ``code`` tells the client which typed error to raise."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Scheduler:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.cfg: dict[str, Any] = load_or_none(os.path.join(state_dir, "cluster.json")) or {}
        fresh = not os.path.exists(os.path.join(state_dir, "sched.db"))
        self.db = sqlite3.connect(os.path.join(state_dir, "sched.db"), isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA)
        migrate(self.db)
        # job id → its launcher, for launchers this process started. Kept referenced: a dropped Popen is
        # reaped by subprocess's own cleanup, and its exit would go unseen.
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.cleaning: dict[int, concurrent.futures.Future[int]] = {}
        self.pool_exec = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        self.idle_since: float | None = None
        self.publish_errors: dict[str, str] = {}
        self.last_nodes_doc: Any = None
        self.stopping = False
        # autoscale: the nodes up now (a subset of the pool), and since when each free node is idle
        self.active: list[str] | None = None
        self.free_since: dict[str, float] = {}
        self.trackers: dict[int, watchdog.OutputTracker] = {}
        # nodes that stopped answering during a job: out of placement until a probe reaches them again
        self.down: dict[str, float] = {}
        self.probes: dict[str, concurrent.futures.Future[bool]] = {}
        self.down_idle_since: float | None = None
        self.hangs: dict[int, concurrent.futures.Future[list[str]]] = {}
        self.hang_checked: dict[int, float] = {}
        self.next_review: float | None = None
        self.scaling: concurrent.futures.Future[None] | None = None
        self.rebuilt = self.rebuild_from_share() if fresh else 0

    # -- helpers ------------------------------------------------------------------------------------
    def log(self, line: str) -> None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{now()} {line}\n")
            sys.stderr.flush()

    def settings(self) -> autoscale.AutoScaleSettings | None:
        data = self.cfg.get("autoscale")
        return autoscale.AutoScaleSettings.from_dict(data) if data else None

    def pool(self) -> list[dict[str, Any]]:
        """Every node the cluster may have: its nodes, or with autoscale every node up to max_nodes."""
        return list(self.cfg.get("pool") or self.cfg.get("nodes", []))

    def nodes(self) -> list[dict[str, Any]]:
        """The nodes up now."""
        if self.settings() is None:
            return list(self.cfg.get("nodes", []))
        if self.active is None:
            self.active = [n["id"] for n in self.cfg.get("nodes", [])]
        return [n for n in self.pool() if n["id"] in self.active]

    def capacity(self) -> int:
        """The most nodes a job may ask for: the cluster's size, or max_nodes with autoscale."""
        settings = self.settings()
        return settings.max_nodes if settings is not None else len(self.nodes())

    def job_share_dir(self, experiment: str, name: str) -> str:
        return os.path.join(self.cfg["meta_root"], "experiments", experiment, "jobs", name)

    def job_state_dir(self, job_id: int) -> str:
        return os.path.join(self.state_dir, "jobs", str(job_id))

    def rows(self, where: str, *args: Any) -> list[sqlite3.Row]:
        # ``where`` is always one of this module's literal clauses; values go through parameters
        return list(self.db.execute(f"SELECT * FROM jobs WHERE {where} ORDER BY id", args))  # noqa: S608

    def update(self, job_id: int, **fields: Any) -> None:
        fields.setdefault("published", 0)
        names = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE jobs SET {names} WHERE id = ?", (*fields.values(), job_id))  # noqa: S608

    def held(self) -> dict[str, tuple[int, str]]:
        """node id → (job id, phase) for every node a job holds (running or being cleaned up)."""
        out: dict[str, tuple[int, str]] = {}
        for row in self.rows("state IN ('running', 'cleaning')"):
            phase = "cleaning" if row["state"] == "cleaning" else (row["phase"] or "preparing")
            for node in json.loads(row["nodes"]):
                out[node] = (row["id"], phase)
        return out

    # -- requests -------------------------------------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("cluster"):
            self.set_cluster(request["cluster"])
        op = request.get("op")
        if op == "submit":
            return self.submit(request)
        if op == "terminate":
            return self.terminate(request)
        if op in ("ping", "nodes"):
            return {"ok": True, "pid": os.getpid()}
        raise RequestError("invalid", f"unknown request {op!r}")

    def set_cluster(self, cfg: dict[str, Any]) -> None:
        if cfg == self.cfg:
            return
        self.cfg = cfg
        write_json_atomic(os.path.join(self.state_dir, "cluster.json"), cfg, sync=False)
        if self.settings() is None:
            self.active = None
        elif self.active is not None:  # ours is the truth of which nodes are up; drop what left the pool
            pool = {n["id"] for n in self.pool()}
            self.active = [n for n in self.active if n in pool]
        total = self.capacity()
        for row in self.rows("state = 'queued' AND node_count > ?", total):
            self.finish(
                row,
                "failed",
                None,
                f"the cluster was resized to {total} node(s) while the job waited; it needs "
                f"{row['node_count']} (resize the cluster and submit it again)",
            )

    def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        experiment, name = str(request.get("experiment", "")), str(request.get("name", ""))
        if not NAME.match(experiment) or not NAME.match(name):
            raise RequestError("invalid", f"invalid job name {experiment!r}/{name!r}")
        node_count = int(request["node_count"])
        if node_count < 1:
            raise RequestError("invalid", f"node_count must be at least 1, not {node_count}")
        if node_count > self.capacity():
            raise RequestError(
                "capacity", f"the job needs {node_count} node(s); the cluster has {self.capacity()}"
            )
        request_id = str(request.get("request_id") or uuid.uuid4().hex)
        again = self.rows("request_id = ?", request_id)
        if again:
            return {"ok": True, "id": again[0]["id"], "repeated": True}
        wall = request.get("max_wall_clock_seconds")
        rebuilt = self.rows("key = ? AND state = 'queued' AND request_id IS NULL", f"{experiment}/{name}")
        if rebuilt:  # found on the share when this scheduler started: the submit that wrote it adopts it
            self.db.execute("DELETE FROM jobs WHERE id = ?", (rebuilt[0]["id"],))
        codes = [int(c) for c in request.get("retry_on_exit_codes") or []]
        try:
            cur = self.db.execute(
                "INSERT INTO jobs (key, experiment, name, request_id, node_count, wall, state, creation_time,"
                " hang, max_retries, retry_codes, max_cost, price)"
                " VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
                (
                    f"{experiment}/{name}",
                    experiment,
                    name,
                    request_id,
                    node_count,
                    wall,
                    request.get("created"),
                    request.get("hang_timeout"),
                    int(request.get("max_retries") or 0),
                    json.dumps(codes),
                    request.get("max_cost"),
                    request.get("price"),
                ),
            )
        except sqlite3.IntegrityError as exc:
            raise RequestError("exists", f"job {experiment}/{name} is already queued or running") from exc
        job_id = int(cur.lastrowid or 0)
        secrets = request.get("secrets") or {}
        os.makedirs(self.job_state_dir(job_id), mode=0o700, exist_ok=True)
        if secrets:
            write_json_atomic(os.path.join(self.job_state_dir(job_id), "secrets.json"), secrets, mode=0o600)
        self.log(f"queued {experiment}/{name} (id {job_id}, {node_count} node(s))")
        self.schedule()
        self.publish()
        return {"ok": True, "id": job_id}

    def terminate(self, request: dict[str, Any]) -> dict[str, Any]:
        key = f"{request.get('experiment')}/{request.get('name')}"
        rows = self.rows(f"key = ? AND state IN {ACTIVE}", key)
        if not rows:
            return {"ok": True, "found": False}
        row = rows[0]
        if row["state"] == "queued":
            self.finish(row, "terminated", None, "terminated by the user while queued")
        elif row["state"] == "running" and row["stop_state"] is None:
            self.stop(row, "terminated", "terminated by the user")
        self.publish()
        return {"ok": True, "found": True}

    # -- job lifecycle --------------------------------------------------------------------------------
    def schedule(self) -> None:
        """Start what can start now (see ``plan``)."""
        held = self.held()
        free = [n for n in self.nodes() if n["id"] not in held and n["id"] not in self.down]
        rows = {r["id"]: r for r in self.rows("state = 'queued'")}
        queued = [Waiting(r["id"], r["node_count"], r["wall"]) for r in rows.values()]
        running = [
            Holding(
                len(json.loads(r["nodes"])), r["started"] + r["wall"] if r["wall"] and r["started"] else None
            )
            for r in self.rows("state IN ('running', 'cleaning')")
        ]
        for job_id, count in plan(queued, running, len(free), time.time()):
            self.start(rows[job_id], free[:count])
            free = free[count:]

    def start(self, row: sqlite3.Row, nodes: list[dict[str, Any]]) -> None:
        job_id = row["id"]
        tag = uuid.uuid4().hex
        job_dir = self.job_state_dir(job_id)
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        for stale in ("result.json", "phase.json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(job_dir, stale))
        share_dir = self.job_share_dir(row["experiment"], row["name"])
        assignment = {
            "launch": os.path.join(share_dir, "run", "launch.json"),
            "nodes": nodes,
            "tag": tag,
            "attempt": row["attempt"],
            "node_main": self.cfg["node_main"],
        }
        write_json_atomic(os.path.join(job_dir, "assignment.json"), assignment, sync=False)
        launch = load_or_none(assignment["launch"]) or {}
        env = dict(os.environ)
        env.update(self.cfg.get("env", {}))
        env[TAG_VAR] = tag
        t = time.time()
        try:
            with open(os.path.join(job_dir, "launcher.log"), "ab") as out:
                proc = subprocess.Popen(
                    [self.cfg["python"], "-S", self.cfg["node_main"], "launch", job_dir],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            self.finish(row, "failed", None, f"could not start the job's launcher: {exc}")
            return
        self.children[job_id] = proc
        self.update(
            job_id,
            state="running",
            started=t,
            start_time=iso(t),
            nodes=json.dumps([n["id"] for n in nodes]),
            tag=tag,
            launcher_pid=proc.pid,
            phase="preparing",
            stdouterr=launch.get("stdouterr_dir"),
        )
        self.trackers[job_id] = watchdog.OutputTracker()
        self.log(f"started {row['key']} on {', '.join(n['id'] for n in nodes)} (launcher pid {proc.pid})")

    def stop(self, row: sqlite3.Row, state: str, reason: str, cause: str | None = None) -> None:
        self.update(row["id"], stop_state=state, stop_reason=reason, stop_sent=time.time(), stop_cause=cause)
        if row["launcher_pid"]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(row["launcher_pid"], signal.SIGTERM)

    def watch(self) -> None:
        """Launchers that ended, stops that take too long, wall clocks, phases."""
        for job_id, proc in list(self.children.items()):
            code = proc.poll()
            if code is not None:
                del self.children[job_id]
                self.launcher_ended(job_id, code)
        t = time.time()
        for row in self.rows("state = 'running'"):
            pid = row["launcher_pid"]
            if row["id"] not in self.children and not self.alive(pid, row["tag"]):
                self.launcher_ended(row["id"], None)
                continue
            if row["stop_state"] is None and row["wall"] and t - row["started"] > row["wall"]:
                self.stop(
                    row,
                    "failed",
                    f"maxWallClockTime of {row['wall']:g}s exceeded; the job was terminated",
                    retries.EndCause.WALL_CLOCK.value,
                )
            elif row["stop_state"] is None and row["max_cost"] and row["price"] is not None:
                self.check_cost(row, t)
                if row["hang"] and row["stdouterr"]:
                    self.check_hang(row, t)
            elif row["stop_state"] is None and row["hang"] and row["stdouterr"]:
                self.check_hang(row, t)
            elif row["stop_sent"] and t - row["stop_sent"] > TERM_GRACE + 5:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if row["phase"] != "running":
                phase = load_or_none(os.path.join(self.job_state_dir(row["id"]), "phase.json")) or {}
                if phase.get("phase") and phase["phase"] != row["phase"]:
                    self.update(row["id"], phase=phase["phase"])

    @staticmethod
    def alive(pid: int | None, tag: str | None) -> bool:
        return bool(pid and tag and pid in procs.tagged_pids(tag))

    def launcher_ended(self, job_id: int, code: int | None) -> None:
        """Record what the launcher left, then clean every node of the job before freeing it.
        ``code`` is its exit status as subprocess gives it (negative: a signal; None: not our child)."""
        row = self.rows("id = ?", job_id)[0]
        result = load_or_none(os.path.join(self.job_state_dir(job_id), "result.json"))
        if result is None:
            how = f"was killed by signal {-code}" if code is not None and code < 0 else "died"
            if code is not None and code > 0:
                how = f"exited with code {code} without a result"
            result = {
                "exit_code": None,
                "reason": f"the job's launcher {how}; every process of the job was stopped",
            }
        evicted = self.evictions(row)
        if row["stop_state"]:
            cause = row["stop_cause"] or retries.EndCause.USER_TERMINATE.value
            reason = row["stop_reason"]
        elif evicted:
            cause = retries.EndCause.EVICTED.value
            reason = "evicted: " + ", ".join(
                f"{e.get('node')} ({e.get('event_type', 'Preempt')})" for e in evicted
            )
        elif result.get("exit_code") is None:
            lost = (code is not None and code < 0) or "stopped answering" in str(result.get("reason"))
            cause = retries.EndCause.NODE_LOST.value if lost else retries.EndCause.EXIT.value
            reason = result.get("reason") or "the job ended before its ranks ran"
        else:
            lost = "stopped answering" in str(result.get("reason"))
            cause = retries.EndCause.NODE_LOST.value if lost else retries.EndCause.EXIT.value
            reason = result.get("reason")
        self.update(
            job_id,
            state="cleaning",
            exit_code=result.get("exit_code"),
            reason=json.dumps([cause, reason]),
        )
        if self.cfg.get("ssh_command") is None and row["tag"] and not procs.tagged_pids(row["tag"]):
            self.conclude(self.rows("id = ?", job_id)[0])
            return  # nothing of it is left on this machine: its nodes are free at once
        self.cleaning[job_id] = self.pool_exec.submit(self.clean_nodes, row["tag"], json.loads(row["nodes"]))

    def evictions(self, row: sqlite3.Row) -> list[dict[str, Any]]:
        """The eviction notices the job's nodes marked in its run folder during this attempt."""
        run_dir = os.path.join(self.job_share_dir(row["experiment"], row["name"]), "run")
        try:
            names = sorted(n for n in os.listdir(run_dir) if n.startswith("evicted-") and n.endswith(".json"))
        except OSError:
            return []
        return [load_or_none(os.path.join(run_dir, n)) or {} for n in names]

    def clear_evictions(self, row: sqlite3.Row) -> None:
        run_dir = os.path.join(self.job_share_dir(row["experiment"], row["name"]), "run")
        with contextlib.suppress(OSError):
            for name in os.listdir(run_dir):
                if name.startswith(("evicted-", "simulate-eviction-")) and name.endswith(".json"):
                    os.unlink(os.path.join(run_dir, name))

    def clean_nodes(self, tag: str, node_ids: list[str]) -> int:
        """End what is left of the job on each of its nodes; returns how many processes survived."""
        if not tag:
            return 0
        if self.cfg.get("ssh_command") is None:
            return procs.reap(tag)
        by_id = {n["id"]: n for n in self.nodes()}
        left = 0
        for address in {by_id[n]["address"] for n in node_ids if n in by_id}:
            argv = [
                *self.cfg["ssh_command"],
                address,
                shlex.join([self.cfg["python"], "-S", self.cfg["node_main"], "reap", tag]),
            ]
            try:
                res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
                left += int(res.stdout.decode().strip() or "0") if res.returncode == 0 else 0
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass  # an unreachable node cannot run the job's processes for us to see; its work is lost
        return left

    def reap_cleaned(self) -> None:
        for job_id, fut in list(self.cleaning.items()):
            if not fut.done():
                continue
            del self.cleaning[job_id]
            row = self.rows("id = ?", job_id)[0]
            try:
                left = fut.result()
            except Exception as exc:  # pragma: no cover - a bug in cleaning must not stop the scheduler
                self.log(f"cleaning {row['key']} failed: {exc!r}")
                left = 0
            if left:
                self.log(f"{left} process(es) of {row['key']} survived SIGKILL; trying again")
                self.cleaning[job_id] = self.pool_exec.submit(
                    self.clean_nodes, row["tag"], json.loads(row["nodes"])
                )
                continue
            self.conclude(row)

    def conclude(self, row: sqlite3.Row) -> None:
        """An attempt ended and its nodes are empty: requeue it (the retry policy) or end the job."""
        cause_name, detail = json.loads(row["reason"])
        cause = retries.EndCause(cause_name)
        if cause is retries.EndCause.NODE_LOST:
            for node in json.loads(row["nodes"]):
                if f"node {node} stopped answering" in str(detail):
                    self.down[node] = time.time()
                    self.log(f"node {node} stopped answering: no job goes there until it answers again")
        history = [retries.Attempt.from_dict(a) for a in json.loads(row["attempts"])]
        policy = retries.RetryPolicy(row["max_retries"], tuple(json.loads(row["retry_codes"])))
        exit_code = row["exit_code"]
        if cause is retries.EndCause.EXIT and exit_code is None:
            exit_code = 1  # job preparation failed, or the launcher could not start the ranks
        decision = retries.decide(policy, cause, exit_code=exit_code, detail=detail, history=history)
        attempt = retries.Attempt(
            index=row["attempt"],
            start=row["start_time"] or now(),
            nodes=tuple(json.loads(row["nodes"])),
            end=now(),
            cause=cause,
            exit_code=row["exit_code"],
            reason=decision.reason,
            extra={"evictions": self.evictions(row)} if cause is retries.EndCause.EVICTED else {},
        )
        if not decision.requeue:
            self.update(row["id"], attempts=json.dumps([*[a.to_dict() for a in history], attempt.to_dict()]))
            self.finish(
                self.rows("id = ?", row["id"])[0], decision.outcome.value, row["exit_code"], decision.reason
            )
            return
        if row["stdouterr"]:  # the next attempt writes fresh logs; this one's are kept beside them
            try:
                retries.archive_attempt_logs(row["stdouterr"], row["attempt"])
                attempt = replace(attempt, log_dir=f"attempt-{row['attempt'] + 1}")
            except OSError as exc:
                self.log(f"could not keep the logs of {row['key']} attempt {row['attempt']}: {exc}")
        self.trackers.pop(row["id"], None)
        self.clear_evictions(row)
        self.update(
            row["id"],
            state="queued",
            attempt=row["attempt"] + 1,
            attempts=json.dumps([*[a.to_dict() for a in history], attempt.to_dict()]),
            nodes="[]",
            started=None,
            start_time=None,
            tag=None,
            launcher_pid=None,
            phase=None,
            exit_code=None,
            reason=decision.reason,
            stop_state=None,
            stop_reason=None,
            stop_sent=None,
            stop_cause=None,
        )
        self.log(f"{row['key']} requeued: {decision.reason}")

    def check_cost(self, row: sqlite3.Row, t: float) -> None:
        """End the job once price × nodes × hours, over every attempt, passes its max_cost."""
        node_hours = len(json.loads(row["nodes"])) * (t - row["started"]) / 3600.0
        for attempt in json.loads(row["attempts"]):
            start, end = attempt.get("start"), attempt.get("end")
            if start and end:
                seconds = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
                node_hours += max(0.0, seconds) / 3600.0 * len(attempt.get("nodes") or [])
        cost = row["price"] * node_hours
        if cost > row["max_cost"]:
            reason = f"estimated cost {cost:.2f} passed max_cost {row['max_cost']:g}; the job was stopped"
            self.stop(row, "failed", reason, retries.EndCause.WALL_CLOCK.value)

    def probe_down_nodes(self) -> None:
        """Reach each node that stopped answering, every few seconds; one that answers takes jobs again."""
        for node_id, fut in list(self.probes.items()):
            if fut.done():
                del self.probes[node_id]
                if fut.result():
                    self.down.pop(node_id, None)
                    self.log(f"node {node_id} answers again")
        t = time.time()
        if self.down and not self.rows(f"state IN {ACTIVE}"):
            self.down_idle_since = self.down_idle_since or t
            if (
                t - self.down_idle_since > 600
            ):  # nothing waits for them: the backend's own status tells the rest
                self.log(f"giving up on {', '.join(self.down)}: no answer for 10 minutes and no job waiting")
                self.down.clear()
        else:
            self.down_idle_since = None
        by_id = {n["id"]: n for n in self.pool()}
        for node_id, since in list(self.down.items()):
            if node_id not in self.probes and t - since > 2.0 and node_id in by_id:
                self.down[node_id] = t
                self.probes[node_id] = self.pool_exec.submit(self.answers, by_id[node_id]["address"])

    def answers(self, address: str) -> bool:
        if self.cfg.get("ssh_command") is None:
            return True
        argv = [*self.cfg["ssh_command"], "-o", "ConnectTimeout=5", address, "true"]
        try:
            return subprocess.run(argv, capture_output=True, timeout=15, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    # -- the hang watchdog ----------------------------------------------------------------------------
    def check_hang(self, row: sqlite3.Row, t: float) -> None:
        """No output from any rank for ``hang`` seconds: collect every node's stacks, then end the job."""
        job_id = row["id"]
        if job_id in self.hangs:
            fut = self.hangs[job_id]
            if fut.done():
                del self.hangs[job_id]
                files = fut.result()
                silent = t - max(self.trackers[job_id].last_change or row["started"], row["started"])
                self.stop(row, "failed", watchdog.hang_reason(silent, files), retries.EndCause.HANG.value)
            return
        if t - self.hang_checked.get(job_id, 0.0) < 1.0:
            return
        self.hang_checked[job_id] = t
        tracker = self.trackers.setdefault(job_id, watchdog.OutputTracker())
        last = tracker.observe(watchdog.job_log_files(row["stdouterr"]), t)
        if watchdog.hang_verdict(last, row["started"], t, row["hang"]) is not None:
            self.log(f"{row['key']}: no output for {row['hang']:g} s; collecting stacks")
            self.hangs[job_id] = self.pool_exec.submit(
                self.collect_stacks, row["tag"], json.loads(row["nodes"]), row["stdouterr"]
            )

    def collect_stacks(self, tag: str, node_ids: list[str], out_dir: str) -> list[str]:
        """``stacks-<node>.txt`` in the job's logs for every node of the job; returns the file names."""
        files = []
        by_id = {n["id"]: n for n in self.pool()}
        for node_id in node_ids:
            if self.cfg.get("ssh_command") is None:
                pids = stacks.find_job_python_pids(tag)
                path = os.path.join(out_dir, stacks.stacks_file_name(node_id))
                stacks.collect_stacks(pids, path, timeout=20, node=node_id)
                files.append(os.path.basename(path))
                continue
            command = [
                self.cfg["python"],
                "-S",
                self.cfg["node_main"],
                "stacks",
                "--tag",
                tag,
                "--out",
                out_dir,
            ]
            argv = [*self.cfg["ssh_command"], by_id.get(node_id, {"address": node_id})["address"],
                    shlex.join([*command, "--node", node_id, "--timeout", "20"])]  # fmt: skip
            try:
                res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
                if res.returncode == 0 and res.stdout.strip():
                    files.append(os.path.basename(res.stdout.decode().strip().splitlines()[-1]))
            except (OSError, subprocess.TimeoutExpired) as exc:
                self.log(f"no stacks from {node_id}: {exc}")
        return files

    def finish(self, row: sqlite3.Row, state: str, exit_code: int | None, reason: str | None) -> None:
        self.update(row["id"], state=state, exit_code=exit_code, reason=reason, end_time=now(), phase=None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.job_state_dir(row["id"]), "secrets.json"))
        self.log(f"{row['key']} {state}" + (f": {reason}" if reason else ""))

    # -- what readers see -----------------------------------------------------------------------------
    def status_doc(self, row: sqlite3.Row) -> dict[str, Any]:
        state = "running" if row["state"] == "cleaning" else row["state"]
        doc: dict[str, Any] = {
            "state": state,
            "creation_time": row["creation_time"],
            "heartbeat": now(),
            "scheduler": {"host": socket.gethostname(), "pid": os.getpid(), "job_id": row["id"]},
        }
        if row["start_time"]:
            doc.update(start_time=row["start_time"], nodes=json.loads(row["nodes"]))
            doc["preparing"] = state == "running" and row["phase"] == "preparing"
            doc["attempt"] = row["attempt"]
        attempts = json.loads(row["attempts"])
        if attempts:
            doc["attempts"] = attempts
            doc["attempt"] = row["attempt"]
        if state == "queued" and attempts:
            doc["requeue_reason"] = row["reason"]
        if state not in ("queued", "running"):
            doc.update(end_time=row["end_time"], exit_code=row["exit_code"], failure_reason=row["reason"])
        return doc

    def deleted(self, row: sqlite3.Row) -> bool:
        jobs = os.path.join(self.cfg["meta_root"], "experiments", row["experiment"], "jobs")
        return os.path.isdir(jobs) and not os.path.exists(self.job_share_dir(row["experiment"], row["name"]))

    def note_publish_error(self, row: sqlite3.Row, path: str, exc: OSError) -> None:
        if self.publish_errors.get(row["key"]) != str(exc):
            self.log(f"cannot write {path} yet ({exc}); the outcome is kept here and retried")
            self.publish_errors[row["key"]] = str(exc)

    def publish(self) -> None:
        """Write changed job records and node assignments to the share; a failed write is retried later."""
        # Node assignments first: a reader that sees a job's end then sees its nodes free as well.
        held = self.held()
        keys = {r["id"]: r["key"] for r in self.rows(f"state IN {ACTIVE}")}
        queued = [r["key"] for r in self.rows("state = 'queued'")]
        # no job held or queued: idle since the last job's end (None: none ended yet), for "is it forgotten?"
        last_end = None if held or queued else self.db.execute("SELECT MAX(end_time) FROM jobs").fetchone()[0]
        doc = {
            "nodes": {
                node: {"job": keys.get(jid, ""), "phase": phase} for node, (jid, phase) in held.items()
            },
            "queued": queued,
            "down": sorted(self.down),
            "idle_since": last_end,
        }
        if doc != self.last_nodes_doc:
            try:
                write_json_atomic(os.path.join(self.cfg["cluster_dir"], "nodes.json"), doc, sync=False)
                self.last_nodes_doc = doc
            except OSError:
                pass
        t = time.time()
        due = self.rows(f"published = 0 OR (state IN {ACTIVE} AND beat < ?)", t - HEARTBEAT)
        for row in due:
            path = os.path.join(self.job_share_dir(row["experiment"], row["name"]), "status.json")
            try:
                write_json_atomic(path, self.status_doc(row))
            except FileNotFoundError as exc:
                if self.deleted(row):  # the job's folder was removed from a share that is there
                    self.db.execute("UPDATE jobs SET published = 1, beat = ? WHERE id = ?", (t, row["id"]))
                    continue
                self.note_publish_error(row, path, exc)
                continue
            except OSError as exc:
                self.note_publish_error(row, path, exc)
                continue
            self.publish_errors.pop(row["key"], None)
            self.db.execute("UPDATE jobs SET published = 1, beat = ? WHERE id = ?", (t, row["id"]))

    # -- recovery -------------------------------------------------------------------------------------
    def rebuild_from_share(self) -> int:
        """A new database on a node that ran jobs before (the head node was replaced): rebuild the queue
        from the share's records. Queued jobs without secrets wait again; jobs that were running are
        reported failed (their processes are ended once their tags are found) rather than forgotten."""
        root = os.path.join(self.cfg.get("meta_root", ""), "experiments")
        count = 0
        try:
            experiments = sorted(os.listdir(root))
        except OSError:
            return 0
        for exp in experiments:
            try:
                jobs = sorted(os.listdir(os.path.join(root, exp, "jobs")))
            except OSError:
                continue
            for name in jobs:
                if not (NAME.match(exp) and NAME.match(name)):
                    continue
                base = os.path.join(root, exp, "jobs", name)
                status = load_or_none(os.path.join(base, "status.json")) or {}
                record = load_or_none(os.path.join(base, "job.json")) or {}
                spec = record.get("spec") or {}
                if spec.get("cluster") != self.cfg.get("cluster") or status.get("state") not in (
                    "queued",
                    "running",
                ):
                    continue
                count += 1
                created = status.get("creation_time")
                if status["state"] == "queued" and not spec.get("secret_environment"):
                    self.db.execute(
                        "INSERT INTO jobs (key, experiment, name, node_count, wall, state, creation_time)"
                        " VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                        (
                            f"{exp}/{name}",
                            exp,
                            name,
                            int(spec.get("node_count", 1)),
                            spec.get("max_wall_clock_seconds"),
                            created,
                        ),
                    )
                    continue
                why = (
                    "lost with the cluster's head node while it ran"
                    if status["state"] == "running"
                    else "lost with the cluster's head node (its secrets were kept only there): submit again"
                )
                self.db.execute(
                    "INSERT INTO jobs (key, experiment, name, node_count, state, creation_time, start_time,"
                    " end_time, nodes, reason) VALUES (?, ?, ?, ?, 'failed', ?, ?, ?, ?, ?)",
                    (
                        f"{exp}/{name}",
                        exp,
                        name,
                        int(spec.get("node_count", 1)),
                        created,
                        status.get("start_time"),
                        now(),
                        json.dumps(status.get("nodes", [])),
                        why,
                    ),
                )
        return count

    def adopt(self) -> None:
        """After a restart on the same node: launchers that outlived the old scheduler are watched again;
        jobs whose launcher is gone are cleaned up and ended from what the launcher left."""
        for row in self.rows("state = 'cleaning'"):
            self.cleaning[row["id"]] = self.pool_exec.submit(
                self.clean_nodes, row["tag"], json.loads(row["nodes"])
            )
        for row in self.rows("state = 'running'"):
            if not self.alive(row["launcher_pid"], row["tag"]):
                self.launcher_ended(row["id"], None)

    # -- the loop -------------------------------------------------------------------------------------
    def idle(self) -> bool:
        busy = self.rows(f"state IN {ACTIVE} OR published = 0")
        return (
            not busy
            and not self.cleaning
            and self.next_review is None
            and self.scaling is None
            and not self.down
        )

    # -- autoscale ------------------------------------------------------------------------------------
    def autoscale(self) -> None:
        """Grow toward the queue's needs and let nodes idle past the limit go, down to min_nodes — here,
        on the head node, so that no client needs to stay up for a cluster to cost nothing when idle."""
        settings = self.settings()
        if settings is None:
            return
        if self.scaling is not None:
            if not self.scaling.done():
                return
            self.scaling = None
        t = time.time()
        held = self.held()
        up = self.nodes()
        for node in up:
            if node["id"] in held:
                self.free_since.pop(node["id"], None)
            else:
                self.free_since.setdefault(node["id"], t)
        head = self.pool()[0]["id"] if self.pool() else None
        views = [
            autoscale.NodeView(
                n["id"], n["id"] in held, self.free_since.get(n["id"], t), head=n["id"] == head
            )
            for n in up
        ]
        queue = [r["node_count"] for r in self.rows("state = 'queued'")]
        decision = autoscale.decide(settings, views, queue, t)
        self.next_review = decision.next_review
        if not decision.changed:
            return
        kept = [n["id"] for n in up if n["id"] not in decision.remove]
        spare = [n["id"] for n in self.pool() if n["id"] not in kept and n["id"] not in decision.remove]
        grown = spare[: max(0, decision.target - len(kept))]
        self.active = [n["id"] for n in self.pool() if n["id"] in kept or n["id"] in grown]
        for node_id in decision.remove:
            self.free_since.pop(node_id, None)
        self.event(decision.to_dict())
        azure = self.cfg.get("azure")
        if azure and decision.remove:
            self.scaling = self.pool_exec.submit(self.release_azure_nodes, azure, list(decision.remove))
        self.publish_size()

    def release_azure_nodes(self, azure: dict[str, str], remove: list[str]) -> None:
        """Delete the named instances with the scale set's own identity (a role on that scale set only)."""
        from .azure_capacity import AzureCapacity, ScaleSetRef

        try:
            ref = ScaleSetRef(azure["subscription"], azure["resource_group"], azure["vmss"])
            AzureCapacity(ref).delete_instances([r.rsplit("_", 1)[-1] for r in remove])
        except Exception as exc:  # the nodes are out of the queue's reach either way; say why they stay
            self.log(f"could not release {', '.join(remove)} through the scale set's identity: {exc}")

    def event(self, fields: dict[str, Any]) -> None:
        line = json.dumps({"time": now(), **fields}, sort_keys=True)
        self.log(f"autoscale: {line}")
        try:
            with open(os.path.join(self.cfg["cluster_dir"], "events.jsonl"), "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as exc:
            self.log(f"cannot write the event log yet: {exc}")

    def publish_size(self) -> None:
        doc = {"nodes": [n["id"] for n in self.nodes()], "updated": now()}
        try:
            write_json_atomic(os.path.join(self.cfg["cluster_dir"], "size.json"), doc)
        except OSError as exc:
            self.log(f"cannot write the cluster's size yet: {exc}")

    def serve(self, listener: socket.socket) -> int:
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        self.adopt()
        checked = time.monotonic()
        while not self.stopping:
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                if not os.path.exists(os.path.join(self.state_dir, "sched.db")):
                    self.log("this scheduler's folder was removed: exiting")
                    break
            for _key, _ in sel.select(timeout=LOOP):
                self.accept(listener)
            self.watch()
            self.reap_cleaned()
            self.probe_down_nodes()
            self.autoscale()
            self.schedule()
            self.publish()
            if self.idle():
                self.idle_since = self.idle_since or time.monotonic()
                if time.monotonic() - self.idle_since > float(self.cfg.get("idle_exit_seconds", IDLE_EXIT)):
                    break
            else:
                self.idle_since = None
        sel.unregister(listener)
        return 0

    def accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                try:
                    reply = self.handle(json.loads(data))
                except RequestError as exc:
                    reply = {"ok": False, "error": exc.code, "message": str(exc)}
                except (ValueError, KeyError, TypeError) as exc:
                    reply = {"ok": False, "error": "invalid", "message": f"bad request: {exc!r}"}
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError as exc:
                self.log(f"request failed: {exc!r}")


def run(state_dir: str) -> int:
    """The daemon: one per state folder (an exclusive lock), waiting briefly for an exiting one."""
    lock = open(os.path.join(state_dir, "sched.lock"), "a+")  # noqa: SIM115 - held for the process's life
    deadline = time.monotonic() + 5
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                return 0  # another scheduler runs here
            time.sleep(0.02)
    os.chdir(state_dir)  # bind the socket by its short relative name: AF_UNIX paths are capped at 108 bytes
    sock_path = "sched.sock"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    os.chmod(sock_path, 0o600)
    listener.listen(64)
    listener.setblocking(False)
    sched = Scheduler(state_dir)
    sched.log(f"scheduler started (pid {os.getpid()}); rebuilt {sched.rebuilt} job(s) from the share")
    try:
        return sched.serve(listener)
    finally:
        os.unlink(sock_path)
        listener.close()
        sched.down.clear()  # what this process learned of lost nodes goes with it
        sched.publish()
        sched.log("scheduler exiting: nothing queued or running")
