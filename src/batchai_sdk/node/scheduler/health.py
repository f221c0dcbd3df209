"""The scheduler's watch over running jobs and nodes: the cost limit, the hang watchdog (no output for
``hang_notice`` seconds: every node's stacks and a "possibly hung" notice in the status, the job going on;
for ``hang`` seconds: the stacks, then the end), and the nodes that stopped answering, probed until they
answer again; with what the scheduler runs on a node over SSH for them (a probe, a reap, stacks).

Each watch owns its state: ``HangWatch`` the jobs' output trackers, the stacks being collected and the
notices published; ``DownNodes`` which nodes are down, the jobs still to be ended there, and the probes in
flight. They are given the cluster, the store, the scheduler's worker threads and (the hang watch) the
daemon's ``stop``; the daemon asks ``DownNodes`` which nodes placement must skip.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shlex
import sqlite3
import subprocess
import time
from collections.abc import Callable
from datetime import datetime

from ..agent import client as agent
from ..job import stacks
from ..policy import flight, progress, retries, stall, verdict, watchdog
from .cluster import Cluster
from .log import log
from .store import ACTIVE, Store

Stacks = concurrent.futures.Future[tuple[list[str], list[str]]]  # the stack files written, the nodes silent
# the daemon's: ask the job's launcher to stop (row, final state, reason, end cause)
Stop = Callable[[sqlite3.Row, str, str, str | None], None]


def check_cost(row: sqlite3.Row, t: float, stop: Stop) -> None:
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
        stop(row, "failed", reason, retries.EndCause.WALL_CLOCK.value)


class DownNodes:
    """Nodes that stopped answering during a job: out of placement until a probe reaches them again (and
    every job that ended while they were silent is ended there too)."""

    def __init__(self, cluster: Cluster, store: Store, pool_exec: concurrent.futures.Executor) -> None:
        self.cluster = cluster
        self.store = store
        self.pool_exec = pool_exec
        self.since: dict[str, float] = {}  # node id → when it was last found down or probed
        # node id → tags of jobs that ended while it did not answer: reaped there before it is free
        self.unreaped: dict[str, set[str]] = {}
        self.probes: dict[str, concurrent.futures.Future[frozenset[str] | None]] = {}
        self.idle_since: float | None = None  # since when nothing is active while nodes are down
        self.on_back: Callable[[str], None] = lambda node_id: None  # the gate's: checked again first

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.since

    def ids(self) -> list[str]:
        return sorted(self.since)

    def busy(self) -> bool:
        """Whether a node is down (the scheduler stays up to probe it)."""
        return bool(self.since)

    def mark(self, node_id: str) -> None:
        """The node stopped answering: no job goes there until a probe reaches it."""
        self.since[node_id] = time.time()

    def unreached(self, node_id: str, tag: str) -> None:
        """The cleanup of job ``tag`` did not reach the node (called from a cleanup's thread)."""
        self.unreaped.setdefault(node_id, set()).add(tag)

    def owes(self, node_id: str, tag: str) -> bool:
        """Whether job ``tag`` is still to be ended on the node."""
        return tag in self.unreaped.get(node_id, ())

    def clear(self) -> None:
        """Forget which nodes are down (what this process learned of lost nodes goes with it)."""
        self.since.clear()

    def probe(self) -> None:
        """Reach each node that stopped answering, every few seconds; one that answers takes jobs again."""
        for node_id, fut in list(self.probes.items()):
            if fut.done():
                del self.probes[node_id]
                reaped = fut.result()
                if reaped is not None:
                    left = self.unreaped.get(node_id, set()) - reaped
                    if left:  # another job's cleanup failed there meanwhile: the next probe reaps it
                        self.unreaped[node_id] = left
                        continue
                    self.unreaped.pop(node_id, None)
                    self.since.pop(node_id, None)
                    emptied = f"; emptied of {', '.join(sorted(reaped))}" if reaped else ""
                    log(f"node {node_id} answers again{emptied}")
                    self.on_back(node_id)
        t = time.time()
        if self.since and not self.store.jobs(*ACTIVE):
            self.idle_since = self.idle_since or t
            if t - self.idle_since > 600:  # nothing waits for them: the backend's own status tells the rest
                log(f"giving up on {', '.join(self.since)}: no answer for 10 minutes and no job waiting")
                self.since.clear()
        else:
            self.idle_since = None
        by_id = {n["id"]: n for n in self.cluster.pool()}
        for node_id, since in list(self.since.items()):
            if node_id not in self.probes and t - since > 2.0 and node_id in by_id:
                self.since[node_id] = t
                tags = frozenset(self.unreaped.get(node_id, ()))
                self.probes[node_id] = self.pool_exec.submit(
                    answers, self.cluster, by_id[node_id]["address"], tags
                )


class HangWatch:
    """The hang watchdog over running jobs: their output, the stacks collected when they fall silent,
    and the "possibly hung" notices it published (observe mode).

    The stacks are collected a little AHEAD of the limit (``LEAD_S``, or a third of the limit), so that the
    notice (or the end) comes at the limit itself, not the collection's seconds after it; stacks taken
    before the limit are kept only while the job makes no progress: a job that steps again meanwhile is
    not noticed, and its early stacks are dropped."""

    LEAD_S = 5.0  # stacks collected this long before the limit (py-spy: well under a second per rank)
    LOOK_S = 1.0  # how often a job's files are looked at, far from its limit
    NEAR_S = 0.05  # ... and close to it (within LEAD_S): every turn of the loop, so the limit is met

    def __init__(
        self, cluster: Cluster, store: Store, pool_exec: concurrent.futures.Executor, stop: Stop
    ) -> None:
        self.cluster = cluster
        self.store = store
        self.pool_exec = pool_exec
        self.stop = stop
        self.trackers: dict[int, progress.ProgressTracker] = {}
        # job id → (the collection, the job's last progress when it began)
        self.hangs: dict[int, tuple[Stacks, float | None]] = {}
        self.ready: dict[int, tuple[list[str], list[str], float | None]] = {}  # collected, not yet due
        self.checked: dict[int, float] = {}  # job id → when its output was last looked at
        self.asked: dict[int, float | None] = {}  # job id → when its ranks' flight recorders were asked for
        self.noticed: dict[int, float] = {}  # job id → when its "possibly hung" notice was published

    def started(self, job_id: int) -> None:
        """A launcher started: its job's silence is counted from now."""
        self.trackers[job_id] = progress.ProgressTracker()
        self.ready.pop(job_id, None)

    def forget(self, job_id: int) -> None:
        """The attempt ended and the job is queued again: the next attempt is watched afresh."""
        self.trackers.pop(job_id, None)
        self.noticed.pop(job_id, None)
        self.ready.pop(job_id, None)
        self.asked.pop(job_id, None)

    @classmethod
    def lead(cls, limit: float) -> float:
        """How long before ``limit`` the stacks are collected."""
        return min(cls.LEAD_S, limit / 3)

    def check(self, row: sqlite3.Row, t: float) -> None:
        """No progress from the job for a while (no new step once it reports steps, else no output that is
        not a stall warning; policy/progress.py): every node's stacks are collected and read into one
        cross-rank verdict, then the job ends (``hang`` seconds) or, in observe mode (the notice's limit),
        its status, its stdout and its stream say it may hang and which rank differs; that notice goes once
        the job progresses again."""
        job_id = row["id"]
        tracker = self.trackers.setdefault(job_id, progress.ProgressTracker())
        if job_id in self.hangs:
            fut, since = self.hangs[job_id]
            if not fut.done():
                return
            del self.hangs[job_id]
            self.ready[job_id] = (*fut.result(), since)
        limit = tracker.limit(row["hang_notice"])
        due = [x for x in (row["hang"], None if row["notice"] else limit) if x]
        silent = t - max(tracker.last_progress or row["started"], row["started"])
        near = bool(due) and silent >= min(due) - self.lead(min(due)) - self.LOOK_S
        if t - self.checked.get(job_id, 0.0) < (self.NEAR_S if near or job_id in self.ready else self.LOOK_S):
            return
        self.checked[job_id] = t
        last = tracker.observe(row["stdouterr"], t)
        if row["notice"] and last is not None and last > self.noticed.get(job_id, 0.0):
            self.store.update(job_id, notice=None)  # it progressed again: not hung after all
            self.noticed.pop(job_id, None)
            log(f"{row['key']}: progress again; the hang notice is withdrawn")
            return
        if job_id in self.ready:
            files, stopped, since = self.ready[job_id]
            if last != since:  # it progressed while its stacks were taken: not stuck, the stacks are stale
                del self.ready[job_id]
                return
            silent = t - max(last or row["started"], row["started"])
            fails = bool(row["hang"]) and silent >= row["hang"]
            if fails or (limit and not row["notice"] and silent >= limit):
                del self.ready[job_id]
                self.act(row, tracker, files, stopped, t, fails)
            return
        silent = t - max(last or row["started"], row["started"])
        soon = [x for x in due if silent >= x - self.lead(x)]
        if soon:
            fails = row["hang"] in soon
            what = "collecting stacks" if fails else "collecting stacks (observe mode: the job goes on)"
            rule = "no new step" if tracker.stepping else "no output"
            log(f"{row['key']}: {rule} for {silent:.1f} s of {min(soon):g} s; {what}")
            self.asked[job_id] = flight.request(row["stdouterr"])  # PyTorch ranks: their flight recorders
            fut = self.pool_exec.submit(
                collect_stacks, self.cluster, row["tag"], json.loads(row["nodes"]), row["stdouterr"]
            )
            self.hangs[job_id] = (fut, last)

    def act(
        self,
        row: sqlite3.Row,
        tracker: progress.ProgressTracker,
        files: list[str],
        stopped: list[str],
        t: float,
        fails: bool,
    ) -> None:
        """The limit passed (at ``t``) with the stacks in hand: end the job (``hang``, or a node that
        stopped answering) or publish the notice."""
        job_id = row["id"]
        silent = t - max(tracker.last_progress or row["started"], row["started"])
        if stopped:  # the silence is a node's: name it (a lost node, retried as one)
            lost = "; ".join(f"node {n} stopped answering" for n in stopped)
            log(f"{row['key']}: {lost}; stopping the job")
            reason = f"{lost} (no output from the job for {int(silent)} s)"
            self.stop(row, "failed", reason, retries.EndCause.NODE_LOST.value)
            return
        line = self.read_verdict(row, tracker, files, self.asked.pop(job_id, None))
        steps = tracker.stepping
        if fails:
            reason = watchdog.hang_reason(silent, files, verdict=line, steps=steps)
            self.stop(row, "failed", reason, retries.EndCause.HANG.value)
            return
        notice = watchdog.hang_notice(silent, files, row["hang"], verdict=line, steps=steps)
        self.store.update(job_id, notice=notice)
        self.noticed[job_id] = t
        if line:  # one line in the job's output: whoever follows the stream sees it now
            say_in_output(row["stdouterr"], notice)
        log(f"{row['key']}: {notice}")

    @staticmethod
    def read_verdict(
        row: sqlite3.Row, tracker: progress.ProgressTracker, files: list[str], asked: float | None = None
    ) -> str | None:
        """The cross-rank verdict from the nodes' ``stacks-<node>.json`` and, for a PyTorch job, the ranks'
        flight recorders written since ``asked``, for a Horovod job its last stall warning (None: no rank's
        stacks)."""
        paths = [os.path.join(row["stdouterr"], os.path.splitext(f)[0] + ".json") for f in files]
        records = verdict.rank_records(paths)
        if not records:
            return None
        recorded, blame = flight.summary(flight.read(row["stdouterr"], asked))
        warned, named = stall.summary(row["stdouterr"])  # Horovod's stall warnings
        line = verdict.verdict(records, tracker.step, blame=blame or named)
        return "; ".join(x for x in (line, recorded, warned) if x)[:1000]


def say_in_output(stdouterr: str, notice: str) -> None:
    """The notice as one line of the job's ``stdout.txt`` (``[batchai] possibly hung — ...``): whoever
    follows the job's output sees it as it happens. One write of one line, appended; a full or read-only
    share is no reason to stop watching."""
    line = f"{progress.OWN_PREFIX}{notice}\n".encode()
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(stdouterr, "stdout.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def ssh_command(cluster: Cluster) -> list[str]:
    """How the head node reaches the other nodes (for SSH clusters: callers check it is configured)."""
    return list(cluster.cfg.get("ssh_command") or ())


def answers(cluster: Cluster, address: str, tags: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """None unless the node at ``address`` runs a command over SSH (always, without SSH) and every job
    in ``tags`` (jobs that ended while it did not answer) is ended there; else the tags it emptied."""
    if cluster.cfg.get("ssh_command") is None:
        return tags
    # a new connection, not the shared one: the probe is of the node and its network
    argv = [*ssh_command(cluster), "-o", "ControlPath=none", "-o", "ConnectTimeout=5", address, "true"]
    try:
        if subprocess.run(argv, capture_output=True, timeout=15, check=False).returncode != 0:
            return None
    except (OSError, subprocess.TimeoutExpired):
        return None
    for tag in tags:
        if reap_on(cluster, address, tag) != 0:
            return None
    return tags


def reap_on(cluster: Cluster, address: str, tag: str) -> int | None:
    """End the job tagged ``tag`` on the node at ``address``: how many processes survived, or None when
    the node did not answer."""
    with contextlib.suppress(agent.Unavailable):
        return agent.reap(cluster.cfg, address, tag)  # its warm agent; else over SSH
    argv = [
        *ssh_command(cluster),
        address,
        shlex.join([cluster.cfg["python"], "-S", cluster.cfg["node_main"], "reap", tag]),
    ]
    try:
        res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        return int(res.stdout.decode().strip() or "0") if res.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def warm_connection(cluster: Cluster, address: str) -> None:
    """Open the shared SSH connection to a node from the scheduler (whose environment carries no job's
    tag, so no job's cleanup ends it): launchers, mpirun and cleanups then reuse it."""
    argv = [*ssh_command(cluster), "-o", "ConnectTimeout=5", address, "true"]
    try:
        subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def collect_stacks(
    cluster: Cluster, tag: str, node_ids: list[str], out_dir: str
) -> tuple[list[str], list[str]]:
    """``stacks-<node>.txt`` in the job's logs for every node of the job; returns the file names and
    the nodes that did not answer (a stopped or unreachable node explains the silence itself)."""
    files: list[str] = []
    stopped: list[str] = []
    by_id = {n["id"]: n for n in cluster.pool()}
    for node_id in node_ids:
        if cluster.cfg.get("ssh_command") is None:
            pids = stacks.find_job_python_pids(tag)
            path = os.path.join(out_dir, stacks.stacks_file_name(node_id))
            stacks.collect_stacks(pids, path, timeout=20, node=node_id)
            files.append(os.path.basename(path))
            continue
        address = by_id.get(node_id, {"address": node_id})["address"]
        if answers(cluster, address) is None:  # (a node that answers gives the empty set of tags)
            stopped.append(node_id)
            continue
        command = [
            cluster.cfg["python"],
            "-S",
            cluster.cfg["node_main"],
            "stacks",
            "--tag",
            tag,
            "--out",
            out_dir,
        ]
        argv = [
            *ssh_command(cluster),
            address,
            shlex.join([*command, "--node", node_id, "--timeout", "20"]),
        ]
        try:
            res = subprocess.run(argv, capture_output=True, timeout=60, check=False)
            if res.returncode == 0 and res.stdout.strip():
                files.append(os.path.basename(res.stdout.decode().strip().splitlines()[-1]))
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"no stacks from {node_id}: {exc}")
    return files, stopped
