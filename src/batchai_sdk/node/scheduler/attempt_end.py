"""How the scheduler ends a job's attempt: what its launcher left, the eviction notices its nodes marked,
the cleanup of every node (by the job's tag) before they count as free, then a retry or the job's end.

``AttemptEnds`` owns the cleanups in flight (job id → how many of its processes survived). It is given
the store, the cluster, the worker threads, the nodes that stopped answering (a node a cleanup could not
reach is down until it is emptied) and the hang watch (a requeued job is watched afresh).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..common import load_or_none, now
from ..job import procs
from ..policy import retries, watchdog
from ..protocol.launch import Phase, Result, read_result
from ..protocol.paths import (
    FAULT_REQUEST_PREFIX,
    LOST_MARKER_PREFIX,
    PHASE_RECORD,
    RESULT_RECORD,
    SharePaths,
    is_eviction_file,
)
from . import health
from .cluster import Cluster
from .log import log
from .store import STARTING, Store

# what one attempt sets on its job's row; a requeued job starts the next attempt with them empty
ATTEMPT_COLUMNS = (
    "started",
    "start_time",
    "tag",
    "launcher_pid",
    "phase",
    "exit_code",
    "stop_state",
    "stop_reason",
    "stop_sent",
    "stop_cause",
)
# the cause of an "attempt" whose launcher never began the job (its scheduler died in the hand-off): it is
# queued again once its nodes are clean, neither an attempt nor a failure
NOT_STARTED = "not_started"


class AttemptEnds:
    def __init__(
        self,
        store: Store,
        cluster: Cluster,
        pool_exec: concurrent.futures.Executor,
        down: health.DownNodes,
        hangs: health.HangWatch,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.pool_exec = pool_exec
        self.down = down
        self.hangs = hangs
        self.cleaning: dict[int, concurrent.futures.Future[int]] = {}
        self.wake: Callable[[], None] = lambda: None  # the loop's: a finished cleanup is seen at once

    def busy(self) -> bool:
        """Whether a job's nodes are being cleaned."""
        return bool(self.cleaning)

    def launcher_ended(self, job_id: int, code: int | None) -> None:
        """Record what the launcher left, then clean every node of the job before freeing it.
        ``code`` is its exit status as subprocess gives it (negative: a signal; None: not our child)."""
        row = self.store.job(job_id)
        if code is None and row["phase"] == STARTING and not self.began(row):
            # adopted from a launch a killed scheduler recorded: a spare that never got its job folder
            detail = "its scheduler stopped before the job's launcher began; queued again"
            self.clean(row, json.dumps([NOT_STARTED, detail]), None)
            return
        result = self.launcher_result(row)
        if result is None:
            how = f"was killed by signal {-code}" if code is not None and code < 0 else "died"
            if code is not None and code > 0:
                how = f"exited with code {code} without a result"
            result = {
                "exit_code": None,
                "reason": f"the job's launcher {how}; every process of the job was stopped",
            }
        evicted = evictions(self.cluster.share_paths(), row)
        drilled = lost_in_drill(self.cluster.share_paths(), row)
        if row["stop_state"]:
            cause = row["stop_cause"] or retries.EndCause.USER_TERMINATE.value
            reason = row["stop_reason"]
        elif evicted:
            cause = retries.EndCause.EVICTED.value
            reason = "evicted: " + ", ".join(
                f"{e.get('node')} ({e.get('event_type', 'Preempt')})" for e in evicted
            )
        elif drilled:
            cause = retries.EndCause.NODE_LOST.value
            reason = "; ".join(f"node {n} stopped answering (fault drill: lose_node)" for n in drilled)
        else:
            # a node the launcher found silent is a lost node; a launcher that died is a failed attempt,
            # not a lost node (it runs beside this scheduler)
            lost = "stopped answering" in str(result.get("reason"))
            cause = retries.EndCause.NODE_LOST.value if lost else retries.EndCause.EXIT.value
            reason = result.get("reason")
            if result.get("exit_code") is None:
                reason = reason or "the job ended before its ranks ran"
            blamed = watchdog.verdict_of(row["notice"])
            if blamed and result.get("exit_code") != 0:  # e.g. a collective's own timeout: name who hung
                reason = f"{blamed} — then the job failed: {reason}"
        self.clean(row, json.dumps([cause, reason]), result.get("exit_code"))

    def clean(self, row: sqlite3.Row, reason: str, exit_code: int | None) -> None:
        """The attempt ended with ``reason`` (``[cause, detail]``): clean its nodes, then conclude it."""
        job_id = row["id"]
        self.store.update(job_id, state="cleaning", exit_code=exit_code, reason=reason)
        if self.cluster.cfg.get("ssh_command") is None and row["tag"] and not procs.tagged_pids(row["tag"]):
            self.conclude(self.store.job(job_id))
            return  # nothing of it is left on this machine: its nodes are free at once
        nodes = json.loads(row["nodes"])
        # a node the launcher just found silent is not tried again (an SSH connect timeout): it is emptied
        # when it answers (health.DownNodes.probe)
        silent = [n for n in nodes if f"node {n} stopped answering" in reason]
        self.start_cleaning(job_id, row["tag"], nodes, silent)

    def began(self, row: sqlite3.Row) -> bool:
        """Whether this attempt's launcher began the job: it marks that first (phase.json with its tag)."""
        mark: Phase | None = load_or_none(os.path.join(self.store.job_state_dir(row["id"]), PHASE_RECORD))
        if isinstance(mark, dict) and mark.get("tag") in (row["tag"], None):
            return True
        return self.launcher_result(row) is not None

    def launcher_result(self, row: sqlite3.Row) -> Result | None:
        """The outcome this attempt's launcher left: in its node-local folder, else (that disk full) its copy
        in the run folder on the share, which counts only when it carries this attempt's tag."""
        local = read_result(load_or_none(os.path.join(self.store.job_state_dir(row["id"]), RESULT_RECORD)))
        if local is not None:
            return local
        shared = read_result(
            load_or_none(self.cluster.share_paths().result_record(row["experiment"], row["name"]))
        )
        if shared is not None and row["tag"] and shared.get("tag") == row["tag"]:
            return shared
        return None

    def clean_nodes(self, tag: str, node_ids: list[str], silent: list[str] | None = None) -> int:
        """End what is left of the job on each of its nodes but the ``silent`` ones (left for when they
        answer); returns how many processes survived."""
        if not tag:
            return 0
        if self.cluster.cfg.get("ssh_command") is None:
            return procs.reap(tag)
        by_id = {n["id"]: n for n in self.cluster.nodes()}
        left = 0
        skipped = {by_id[n]["address"] for n in silent or () if n in by_id}
        for address in {by_id[n]["address"] for n in node_ids if n in by_id}:
            reaped = None if address in skipped else health.reap_on(self.cluster, address, tag)
            if reaped is None:
                # an unreachable node may still run the job (a partition ends no process): it is not free
                # until it answers and is emptied (health.DownNodes.probe)
                for node_id in node_ids:
                    if node_id in by_id and by_id[node_id]["address"] == address:
                        self.down.unreached(node_id, tag)
            else:
                left += reaped
        return left

    def resume(self, row: sqlite3.Row) -> None:
        """Clean the nodes of a job a previous scheduler was cleaning (recovery); a node already known down
        (a lost head node the client reported) is not waited on: it is emptied when it answers."""
        nodes = json.loads(row["nodes"])
        self.start_cleaning(row["id"], row["tag"], nodes, [n for n in nodes if n in self.down])

    def start_cleaning(
        self, job_id: int, tag: str, nodes: list[str], silent: list[str] | None = None
    ) -> None:
        """``clean_nodes`` on a worker thread; the loop is woken when it is done (``reap_cleaned``)."""
        future = self.pool_exec.submit(self.clean_nodes, tag, nodes, silent)
        future.add_done_callback(lambda _: self.wake())
        self.cleaning[job_id] = future

    def reap_cleaned(self) -> None:
        """Conclude the jobs whose nodes are now clean; clean again where processes survived."""
        for job_id, fut in list(self.cleaning.items()):
            if not fut.done():
                continue
            del self.cleaning[job_id]
            row = self.store.job(job_id)
            try:
                left = fut.result()
            except Exception as exc:  # pragma: no cover - a bug in cleaning must not stop the scheduler
                log(f"cleaning {row['key']} failed: {exc!r}")
                left = 0
            if left:
                log(f"{left} process(es) of {row['key']} survived SIGKILL; trying again")
                self.start_cleaning(job_id, row["tag"], json.loads(row["nodes"]))
                continue
            self.conclude(row)

    def conclude(self, row: sqlite3.Row) -> None:
        """An attempt ended and its nodes are empty: requeue it (the retry policy) or end the job."""
        cause_name, detail = json.loads(row["reason"])
        if cause_name == NOT_STARTED:
            self.hangs.forget(row["id"])
            columns = dict.fromkeys(ATTEMPT_COLUMNS)
            self.store.update(row["id"], **columns, state="queued", nodes="[]", reason=detail)
            log(f"{row['key']}: {detail}")
            return
        cause = retries.EndCause(cause_name)
        paths = self.cluster.share_paths()
        for node in json.loads(row["nodes"]):
            if cause is retries.EndCause.NODE_LOST and f"node {node} stopped answering" in str(detail):
                self.down.mark(node)
                log(f"node {node} stopped answering: no job goes there until it answers again")
            elif self.down.owes(node, row["tag"]):
                self.down.mark(node)
                log(
                    f"node {node} did not answer the cleanup of {row['key']}: no job goes there until it does"
                )
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
            extra={"evictions": evictions(paths, row)} if cause is retries.EndCause.EVICTED else {},
        )
        if not decision.requeue:
            self.store.update(
                row["id"], attempts=json.dumps([*[a.to_dict() for a in history], attempt.to_dict()])
            )
            self.store.finish(
                self.store.job(row["id"]),
                decision.outcome.value,
                row["exit_code"],
                decision.reason,
            )
            return
        if row["stdouterr"]:  # the next attempt writes fresh logs; this one's are kept beside them
            try:
                retries.archive_attempt_logs(row["stdouterr"], row["attempt"])
                attempt = replace(attempt, log_dir=f"attempt-{row['attempt'] + 1}")
            except OSError as exc:
                log(f"could not keep the logs of {row['key']} attempt {row['attempt']}: {exc}")
        self.hangs.forget(row["id"])
        clear_evictions(paths, row)
        self.store.update(
            row["id"],
            **dict.fromkeys(ATTEMPT_COLUMNS),
            state="queued",
            attempt=row["attempt"] + 1,
            attempts=json.dumps([*[a.to_dict() for a in history], attempt.to_dict()]),
            nodes="[]",
            reason=decision.reason,
        )
        log(f"{row['key']} requeued: {decision.reason}")


def launcher_alive(pid: int | None, tag: str | None) -> bool:
    """Whether the launcher ``pid`` still runs with the job's tag (not a reused pid)."""
    return bool(pid and tag and pid != os.getpid() and procs.carries_tag(pid, tag))


def evictions(paths: SharePaths, row: sqlite3.Row) -> list[dict[str, Any]]:
    """The eviction notices the job's nodes marked in its run folder during this attempt."""
    run_dir = paths.run_dir(row["experiment"], row["name"])
    try:
        names = sorted(n for n in os.listdir(run_dir) if is_eviction_file(n))
    except OSError:
        return []
    return [load_or_none(os.path.join(run_dir, n)) or {} for n in names]


def lost_in_drill(paths: SharePaths, row: sqlite3.Row) -> list[str]:
    """The nodes a fault drill took away during this attempt (``lose_node``: ``lost-<node>.json``)."""
    run_dir = paths.run_dir(row["experiment"], row["name"])
    try:
        names = sorted(n for n in os.listdir(run_dir) if n.startswith(LOST_MARKER_PREFIX))
    except OSError:
        return []
    marks = [load_or_none(os.path.join(run_dir, n)) or {} for n in names]
    return [str(m["node"]) for m in marks if m.get("tag") == row["tag"] and m.get("node")]


def clear_evictions(paths: SharePaths, row: sqlite3.Row) -> None:
    """Remove the attempt's eviction notices (and simulated ones), and the drills' marks and requests,
    before the job runs again."""
    run_dir = paths.run_dir(row["experiment"], row["name"])
    with contextlib.suppress(OSError):
        for name in os.listdir(run_dir):
            drill = name.startswith((LOST_MARKER_PREFIX, FAULT_REQUEST_PREFIX)) and name.endswith(".json")
            if is_eviction_file(name, simulated=True) or drill:
                os.unlink(os.path.join(run_dir, name))
