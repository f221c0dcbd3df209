"""The scheduler's recovery: a new database (the old one lost, or a replaced head node) is rebuilt from
the share's records of accepted jobs, fencing the nodes of jobs that ran; a restarted scheduler takes back
the launchers, launches and cleanups the previous one left (see docs/concepts.md, what survives what).

Recovery keeps no state of its own: it runs once, when the scheduler starts, on the ``Store`` (the rebuilt
rows go into its database) and through ``AttemptEnds`` (the launchers and cleanups it takes back)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

from ..common import load_or_none
from ..job import procs
from ..policy import retries
from ..policy.queue import priority_rank
from ..protocol.launch import read_result
from ..protocol.names import NAME
from ..protocol.paths import SharePaths
from ..protocol.records import StatusDoc
from . import attempt_end
from .log import log
from .store import STARTING, Failed, Fenced, Store


def rebuild_from_share(store: Store) -> int:
    """A new database on a head node whose old one was lost (or a replaced head node): rebuild the queue
    from the records the share holds of accepted jobs. A record no scheduler wrote is a submit still in
    flight: its client's, never adopted (its request queues it). Queued jobs without secrets wait again;
    jobs that were running fence their nodes: they are held, being cleaned, until every process with
    their tag is ended, and end with the outcome their launcher left on the share if it left one."""
    paths = SharePaths.at_meta(store.cfg.get("meta_root", ""))
    count = 0
    try:
        experiments = sorted(os.listdir(paths.experiments_dir()))
    except OSError:
        experiments = []
    last_id = old_job_ids(store)
    for exp in experiments:
        try:
            jobs = sorted(os.listdir(paths.jobs_dir(exp)))
        except OSError:
            continue
        for name in jobs:
            if not (NAME.match(exp) and NAME.match(name)):
                continue
            raw = load_or_none(paths.status_record(exp, name))
            status = StatusDoc.from_dict(raw if isinstance(raw, dict) else {})
            record = load_or_none(paths.job_record(exp, name)) or {}
            spec = record.get("spec") or {}
            if (
                spec.get("cluster") != store.cfg.get("cluster")
                or not status.accepted
                or status.state not in ("queued", "running")
            ):
                continue
            count += 1
            if status.reporter and status.reporter.job_id:
                last_id = max(last_id, status.reporter.job_id)
            if status.state == "queued" and not spec.get("secret_environment"):
                store.add_rebuilt(
                    exp,
                    name,
                    int(spec.get("node_count", 1)),
                    spec.get("max_wall_clock_seconds"),
                    status.creation_time,
                    priority_rank(spec.get("scheduling_priority")),
                )
                keep_history(store, paths, exp, name, status, spec)
            elif status.state == "running":
                fence(store, paths, exp, name, status, spec)
            else:
                store.add_failed(
                    Failed(
                        exp,
                        name,
                        "lost with the cluster's head node (its secrets were kept only there): submit again",
                        int(spec.get("node_count", 1)),
                        status.creation_time,
                    )
                )
    # new jobs get ids the old database never gave: their node-local folders are not the old jobs'
    store.number_after(last_id)
    return count


def keep_history(
    store: Store, paths: SharePaths, exp: str, name: str, status: StatusDoc, spec: dict[str, Any]
) -> None:
    """A queued job rebuilt after attempts (requeued by the scheduler that was lost, or cut off): it keeps
    its attempts, its retry settings, its watchdog and its logs' folder, so its next attempt is numbered on
    and its earlier attempts' logs and metrics stay part of its one run."""
    attempts = status.attempts or []
    row = store.active_run(f"{exp}/{name}")
    if row is None or row["state"] != "queued":
        return
    store.update(
        row["id"],
        attempt=int(status.attempt if status.attempt is not None else len(attempts)),
        attempts=json.dumps(attempts),
        max_retries=int(spec.get("max_retries") or 0),
        retry_codes=json.dumps([c for c in spec.get("retry_on_exit_codes") or [] if isinstance(c, int)]),
        hang=spec.get("hang_timeout"),
        hang_notice=spec.get("hang_notice"),
        stdouterr=(load_or_none(paths.launch_config(exp, name)) or {}).get("stdouterr_dir"),
    )


def old_job_ids(store: Store) -> int:
    """The highest job id the lost database gave, from the node-local job folders it left."""
    try:
        return max(
            (int(n) for n in os.listdir(os.path.join(store.state_dir, "jobs")) if n.isdigit()), default=0
        )
    except OSError:
        return 0


def fence(
    store: Store, paths: SharePaths, exp: str, name: str, status: StatusDoc, spec: dict[str, Any]
) -> None:
    """A job that ran when the database was lost (its head node lost or replaced): its nodes stay held
    (``cleaning``) until every process with its tag is ended; its outcome is the one its launcher left on
    the share, else the attempt counts as lost with its node: the job is requeued from its checkpoint
    while its ``max_retries`` allow (it keeps its attempts, retry settings and watchdog), and fails only
    when it cannot run again (out of retries, or secrets that were kept only on the lost head node)."""
    result = read_result(load_or_none(paths.result_record(exp, name)))  # a file on the share: data
    ended = result is not None and status.tag is not None and result.get("tag") == status.tag
    if ended and result is not None and result.get("exit_code") is not None:
        cause, exit_code, reason = retries.EndCause.EXIT.value, result.get("exit_code"), result.get("reason")
    elif spec.get("secret_environment"):
        cause, exit_code = retries.EndCause.EXIT.value, None
        reason = (
            "the scheduler's database was lost while the job ran (its head node's state was removed or"
            " replaced), with the job's secrets, kept only there; every process of the job was ended"
            " before its nodes were used again: submit it again"
        )
    else:
        cause, exit_code = retries.EndCause.NODE_LOST.value, None
        reason = (
            "the scheduler's database was lost while the job ran (its head node was lost, or its state"
            " removed or replaced); every process of the job was ended before its nodes were used again"
        )
    codes = [c for c in spec.get("retry_on_exit_codes") or [] if isinstance(c, int)]
    attempts = status.attempts or []
    store.add_fenced(
        Fenced(
            experiment=exp,
            name=name,
            node_count=int(spec.get("node_count", 1)),
            wall=spec.get("max_wall_clock_seconds"),
            creation_time=status.creation_time,
            start_time=status.start_time,
            started=time.time(),
            nodes=list(status.nodes or []),
            tag=status.tag,
            attempt=int(status.attempt if status.attempt is not None else len(attempts)),
            exit_code=exit_code,
            cause=cause,
            detail=reason,
            hang=spec.get("hang_timeout"),
            hang_notice=spec.get("hang_notice"),
            max_retries=int(spec.get("max_retries") or 0),
            retry_codes=codes,
            attempts=attempts,
            stdouterr=(load_or_none(paths.launch_config(exp, name)) or {}).get("stdouterr_dir"),
            priority=priority_rank(spec.get("scheduling_priority")),
        )
    )


def adopt(store: Store, ends: attempt_end.AttemptEnds) -> None:
    """After a restart: cleanups are resumed; launchers that outlived the old scheduler are watched
    again; a launch it recorded as starting is adopted when its tag runs, else ended from what its
    launcher left, or requeued when it never ran; a job whose launcher is gone is cleaned up."""
    for row in store.jobs("cleaning"):
        ends.resume(row)
    for row in store.jobs("running"):
        if row["phase"] == STARTING and not row["launcher_pid"]:
            adopt_starting(store, ends, row)
        elif not attempt_end.launcher_alive(row["launcher_pid"], row["tag"]):
            ends.launcher_ended(row["id"], None)


def adopt_starting(store: Store, ends: attempt_end.AttemptEnds, row: sqlite3.Row) -> None:
    """The old scheduler recorded this launch and may have died before or after starting it, or (a spare
    with the launch's tag) before handing it the job's folder."""
    pid = procs.launcher_pid(row["tag"])
    if pid is not None:  # it started: this one watches it; it is never started twice
        # the phase stays ``starting`` until the launcher marks that it began: one that exits without that
        # mark never got the job, and the job is queued again (attempt_end.NOT_STARTED), not failed
        store.update(row["id"], launcher_pid=pid)
        log(f"adopted the launcher of {row['key']} (pid {pid}) started before a restart")
        return
    # it ran and ended or died (its result, or what is left of it, is read), or it never began: queued
    # again once whatever has its tag (a spare's pre-started world) is ended (attempt_end.NOT_STARTED)
    ends.launcher_ended(row["id"], None)
