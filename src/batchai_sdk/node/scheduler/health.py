"""The scheduler's watch over running jobs and nodes: the cost limit, the hang watchdog (no output for
``hang_notice`` seconds: every node's stacks and a "possibly hung" notice in the status, the job going on;
for ``hang`` seconds: the stacks, then the end), and probes of nodes that stopped answering."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import time
from datetime import datetime
from typing import TYPE_CHECKING

from ..job import stacks
from ..policy import retries, watchdog
from .store import ACTIVE

if TYPE_CHECKING:
    from .daemon import Scheduler


def check_cost(sched: Scheduler, row: sqlite3.Row, t: float) -> None:
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
        sched.stop(row, "failed", reason, retries.EndCause.WALL_CLOCK.value)


def probe_down_nodes(sched: Scheduler) -> None:
    """Reach each node that stopped answering, every few seconds; one that answers takes jobs again."""
    for node_id, fut in list(sched.probes.items()):
        if fut.done():
            del sched.probes[node_id]
            reaped = fut.result()
            if reaped is not None:
                left = sched.unreaped.get(node_id, set()) - reaped
                if left:  # another job's cleanup failed there meanwhile: the next probe reaps it
                    sched.unreaped[node_id] = left
                    continue
                sched.unreaped.pop(node_id, None)
                sched.down.pop(node_id, None)
                emptied = f"; emptied of {', '.join(sorted(reaped))}" if reaped else ""
                sched.log(f"node {node_id} answers again{emptied}")
    t = time.time()
    if sched.down and not sched.rows(f"state IN {ACTIVE}"):
        sched.down_idle_since = sched.down_idle_since or t
        if t - sched.down_idle_since > 600:  # nothing waits for them: the backend's own status tells the rest
            sched.log(f"giving up on {', '.join(sched.down)}: no answer for 10 minutes and no job waiting")
            sched.down.clear()
    else:
        sched.down_idle_since = None
    by_id = {n["id"]: n for n in sched.pool()}
    for node_id, since in list(sched.down.items()):
        if node_id not in sched.probes and t - since > 2.0 and node_id in by_id:
            sched.down[node_id] = t
            tags = frozenset(sched.unreaped.get(node_id, ()))
            sched.probes[node_id] = sched.pool_exec.submit(answers, sched, by_id[node_id]["address"], tags)


def answers(sched: Scheduler, address: str, tags: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """None unless the node at ``address`` runs a command over SSH (always, without SSH) and every job
    in ``tags`` (jobs that ended while it did not answer) is ended there; else the tags it emptied."""
    if sched.cfg.get("ssh_command") is None:
        return tags
    # a new connection, not the shared one: the probe is of the node and its network
    argv = [*sched.cfg["ssh_command"], "-o", "ControlPath=none", "-o", "ConnectTimeout=5", address, "true"]
    try:
        if subprocess.run(argv, capture_output=True, timeout=15, check=False).returncode != 0:
            return None
    except (OSError, subprocess.TimeoutExpired):
        return None
    for tag in tags:
        if reap_on(sched, address, tag) != 0:
            return None
    return tags


def reap_on(sched: Scheduler, address: str, tag: str) -> int | None:
    """End the job tagged ``tag`` on the node at ``address``: how many processes survived, or None when
    the node did not answer."""
    argv = [
        *sched.cfg["ssh_command"],
        address,
        shlex.join([sched.cfg["python"], "-S", sched.cfg["node_main"], "reap", tag]),
    ]
    try:
        res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        return int(res.stdout.decode().strip() or "0") if res.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def warm_connection(sched: Scheduler, address: str) -> None:
    """Open the shared SSH connection to a node from the scheduler (whose environment carries no job's
    tag, so no job's cleanup ends it): launchers, mpirun and cleanups then reuse it."""
    argv = [*sched.cfg["ssh_command"], "-o", "ConnectTimeout=5", address, "true"]
    try:
        subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def check_hang(sched: Scheduler, row: sqlite3.Row, t: float) -> None:
    """No output from any rank for a while: every node's stacks are collected, then the job ends (silent
    for ``hang`` seconds) or, in observe mode (silent for ``hang_notice`` seconds), its status says it may
    hang and where the stacks are; that notice goes once the job writes again."""
    job_id = row["id"]
    if job_id in sched.hangs:
        fut = sched.hangs[job_id]
        if fut.done():
            del sched.hangs[job_id]
            files, stopped = fut.result()
            silent = t - max(sched.trackers[job_id].last_change or row["started"], row["started"])
            if stopped:  # the silence is a node's: name it (a lost node, retried as one)
                lost = "; ".join(f"node {n} stopped answering" for n in stopped)
                sched.log(f"{row['key']}: {lost}; stopping the job")
                reason = f"{lost} (no output from the job for {int(silent)} s)"
                sched.stop(row, "failed", reason, retries.EndCause.NODE_LOST.value)
                return
            if row["hang"] and silent >= row["hang"]:
                sched.stop(row, "failed", watchdog.hang_reason(silent, files), retries.EndCause.HANG.value)
            else:
                sched.update(job_id, notice=watchdog.hang_notice(silent, files, row["hang"]))
                sched.noticed[job_id] = t
        return
    if t - sched.hang_checked.get(job_id, 0.0) < 1.0:
        return
    sched.hang_checked[job_id] = t
    tracker = sched.trackers.setdefault(job_id, watchdog.OutputTracker())
    last = tracker.observe(watchdog.job_log_files(row["stdouterr"]), t)
    if row["notice"] and last is not None and last > sched.noticed.get(job_id, 0.0):
        sched.update(job_id, notice=None)  # it wrote again: not hung after all
        sched.noticed.pop(job_id, None)
        sched.log(f"{row['key']}: output again; the hang notice is withdrawn")
        return
    fails = watchdog.hang_verdict(last, row["started"], t, row["hang"]) is not None
    observed = not row["notice"] and watchdog.hang_verdict(last, row["started"], t, row["hang_notice"])
    if fails or observed:
        limit = row["hang"] if fails else row["hang_notice"]
        what = "collecting stacks" if fails else "collecting stacks (observe mode: the job goes on)"
        sched.log(f"{row['key']}: no output for {limit:g} s; {what}")
        sched.hangs[job_id] = sched.pool_exec.submit(
            collect_stacks, sched, row["tag"], json.loads(row["nodes"]), row["stdouterr"]
        )


def collect_stacks(
    sched: Scheduler, tag: str, node_ids: list[str], out_dir: str
) -> tuple[list[str], list[str]]:
    """``stacks-<node>.txt`` in the job's logs for every node of the job; returns the file names and
    the nodes that did not answer (a stopped or unreachable node explains the silence itself)."""
    files: list[str] = []
    stopped: list[str] = []
    by_id = {n["id"]: n for n in sched.pool()}
    for node_id in node_ids:
        if sched.cfg.get("ssh_command") is None:
            pids = stacks.find_job_python_pids(tag)
            path = os.path.join(out_dir, stacks.stacks_file_name(node_id))
            stacks.collect_stacks(pids, path, timeout=20, node=node_id)
            files.append(os.path.basename(path))
            continue
        if not answers(sched, by_id.get(node_id, {"address": node_id})["address"]):
            stopped.append(node_id)
            continue
        command = [
            sched.cfg["python"],
            "-S",
            sched.cfg["node_main"],
            "stacks",
            "--tag",
            tag,
            "--out",
            out_dir,
        ]
        argv = [*sched.cfg["ssh_command"], by_id.get(node_id, {"address": node_id})["address"],
                shlex.join([*command, "--node", node_id, "--timeout", "20"])]  # fmt: skip
        try:
            res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
            if res.returncode == 0 and res.stdout.strip():
                files.append(os.path.basename(res.stdout.decode().strip().splitlines()[-1]))
        except (OSError, subprocess.TimeoutExpired) as exc:
            sched.log(f"no stacks from {node_id}: {exc}")
    return files, stopped
