"""The health gate inside the scheduler: nodes are checked when they join (the cluster's ``health_check``
level) and before a job that asks for a level starts on them; a node that fails is kept out of placement
with its reason until a later check passes it.

This part owns its state (which nodes passed at which level, which are unusable and why, the check in
flight); it is given the cluster (its configuration and nodes) and the scheduler's worker threads, and
the daemon asks it only which nodes are blocked, whether a job's nodes are ready, and whether a check is
still running. Every report, this scheduler's or one the admin sent with ``check_nodes``, is a signed file
under the cluster's ``health/`` folder on the share; a report found there is applied only when this
scheduler signed it (``health_reports``): a job can write to that folder, and what it writes is ignored.
A report older than the newest applied for a node does not change it (a pass supersedes older failures
for good), and a node that failed the join check is checked again with back-off.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import stat
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..common import write_json_atomic
from ..gate.checks import LEVELS
from ..gate.run import run_gate
from ..protocol.fields import RequestError
from ..protocol.paths import HEALTH_DIR, HEALTH_REPORT
from . import health_reports
from .cluster import Cluster
from .log import log

RANK = {level: i for i, level in enumerate(LEVELS)}
KEEP_UP_S = 600.0
SOURCE_FILES = 50  # the newest report files of the owner's health source read (by name)
RETRY_FIRST, RETRY_MAX = 30.0, 1800.0  # a node that failed the join check: checked again in 30 s, 60 s...


class NodeGate:
    def __init__(self, cluster: Cluster, pool_exec: concurrent.futures.Executor) -> None:
        self.cluster = cluster
        self.pool_exec = pool_exec
        self.passed: dict[str, int] = {}  # node -> the highest level it passed (RANK)
        self.unusable: dict[str, str] = {}  # node -> why
        self.checking: set[str] = set()
        self.running: concurrent.futures.Future[dict[str, Any]] | None = None
        self.copy_to: str | None = None  # the job folder the running check's report goes to as well
        self.seen: set[str] = set()  # report files already applied (read, or written by this process)
        self.rejected: set[str] = set()  # files in the folder this scheduler did not sign: removed by prune
        self.applied = 0  # of the reports now in the folder, how many were applied: a client waits on it
        self.key = health_reports.load_key(cluster.store.state_dir)
        self.as_of: dict[str, float] = {}  # node -> the start time of the newest report applied to it
        self.join_level: str | None = None  # the level of the running check when it is the join check
        self.retry: dict[str, tuple[float, float]] = {}  # node failed at join -> (when to check, back-off)
        self.sourced: dict[str, tuple[int, int]] = {}  # the health source's files read: name -> mtime, size
        self.source_refused: str | None = None  # why the health source's folder is not trusted (logged once)

    @property
    def folder(self) -> str:
        return os.path.join(self.cluster.cfg["cluster_dir"], HEALTH_DIR)

    def level(self) -> str:
        level = str((self.cluster.cfg.get("health") or {}).get("level") or "off")
        return level if level in RANK else "off"

    def blocked(self) -> set[str]:
        """Nodes no job may take: unusable, being checked, or (with a gate on the cluster) not yet checked."""
        out = set(self.unusable) | self.checking
        if self.level() != "off":
            out |= {n["id"] for n in self.cluster.nodes() if n["id"] not in self.passed}
        return out

    def busy(self) -> bool:
        """A check runs, or a node that failed the join check is due again soon (the scheduler stays up
        for it while its back-off is under ``KEEP_UP_S``; past that, the next start checks it again)."""
        return self.running is not None or any(wait < KEEP_UP_S for _, wait in self.retry.values())

    def forget(self, node_id: str) -> None:
        """A node that was lost answers again: it passes the cluster's gate again before it takes a job
        (with the gate off, nothing to pass)."""
        if self.passed.pop(node_id, None) is not None:
            log(f"{node_id} answers again: health check before it takes a job")

    def ready(self, nodes: Sequence[Mapping[str, Any]], level: str, *, copy_to: str | None = None) -> bool:
        """Whether ``nodes`` passed ``level``; if not, a check of them starts (when none runs), its report
        also written to the folder ``copy_to`` (the job's logs, for a job that asked for the check)."""
        need = RANK.get(level, 0)
        missing = [n for n in nodes if self.passed.get(n["id"], 0) < need]
        if not missing:
            return True
        self.start(missing, level, copy_to=copy_to)
        return False

    def start(self, nodes: Sequence[Mapping[str, Any]], level: str, *, copy_to: str | None = None) -> None:
        if self.running is not None or not nodes:
            return
        self.copy_to = copy_to
        self.join_level = None
        self.checking = {n["id"] for n in nodes}
        log(f"health check ({level}) of {', '.join(sorted(self.checking))}")
        chosen = [dict(n) for n in nodes]
        self.running = self.pool_exec.submit(run_gate, dict(self.cluster.cfg), chosen, level)

    def tick(self) -> None:
        """Collect a finished check, read reports clients wrote, and check nodes that joined."""
        if self.running is not None and self.running.done():
            fut, self.running = self.running, None
            try:
                report = fut.result()
            except Exception as exc:  # a bug in the gate must not stop the scheduler; the nodes stay out
                why = {n: f"{n} health check could not run: {exc}" for n in self.checking}
                report = {"level": "basic", "nodes": sorted(self.checking), "checks": [], "unusable": why}
            by_join, self.join_level = self.join_level, None
            self.checking = set()
            kept = self.write({**report, "trigger": "join"} if by_join is not None else report)
            if self.copy_to is not None:  # the job that asked for the check: its report beside its logs
                with contextlib.suppress(OSError):
                    write_json_atomic(os.path.join(self.copy_to, HEALTH_REPORT), kept)
                self.copy_to = None
        self.read_reports()
        self.read_source()
        level = self.level()
        present = {n["id"] for n in self.cluster.nodes()}
        for gone in set(self.retry) - present:  # left the cluster: nothing to check again
            del self.retry[gone]
        if level != "off" and self.running is None:
            t = time.time()
            joined = [
                n
                for n in self.cluster.nodes()
                if n["id"] not in self.passed
                and (n["id"] not in self.unusable or self.retry.get(n["id"], (float("inf"), 0.0))[0] <= t)
            ]
            self.start(joined, level)
            if self.running is not None:
                self.join_level = level

    def back_off(self, report: Mapping[str, Any]) -> None:
        """Nodes the join check failed are checked again later (30 s, doubling to 30 min)."""
        bad = report.get("unusable") or {}
        for node in report.get("nodes") or []:
            if self.as_of.get(node) != float(report.get("started") or 0.0):
                continue  # a newer report decides this node
            if node in bad:
                wait = min(RETRY_MAX, self.retry[node][1] * 2) if node in self.retry else RETRY_FIRST
                self.retry[node] = (time.time() + wait, wait)
                log(f"node {node} failed the join check; checking it again in {wait:.0f} s")
            else:
                self.retry.pop(node, None)

    def write(self, report: dict[str, Any]) -> dict[str, Any]:
        """Sign ``report`` (bounded first), keep it in the cluster's ``health/`` folder and apply it."""
        report = health_reports.normalize(report)
        report.setdefault("started", time.time())
        report = health_reports.sign(self.key, report)
        name = f"{report['started']:.0f}-{uuid.uuid4().hex[:8]}.json"
        try:
            os.makedirs(self.folder, exist_ok=True)
            write_json_atomic(os.path.join(self.folder, name), report)
        except OSError as exc:
            log(f"cannot write the health report yet: {exc}; applied in memory")
        self.seen.add(name)
        self.apply(report)
        self.prune()
        return report

    def prune(self, keep: int = 50) -> None:
        """The newest ``keep`` signed reports stay (their names start with the time); files this scheduler
        did not sign go first, so that no number of them pushes a real report out."""
        for name in sorted(self.rejected):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, name))
        self.rejected.clear()
        try:
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".json"))
        except OSError:
            return
        for name in names[:-keep]:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, name))

    def read_reports(self) -> None:
        try:
            present = sorted(n for n in os.listdir(self.folder) if n.endswith(".json"))
        except OSError:
            return
        names = [n for n in present if n not in self.seen]
        self.applied = len(present)
        for name in names:
            self.seen.add(name)
            shown = health_reports.clip(name, 80)
            try:
                report = health_reports.read_bounded(os.path.join(self.folder, name))
                if not health_reports.signed(self.key, report):
                    log(f"health report {shown} is not signed by this cluster's scheduler: ignored")
                    self.rejected.add(name)
                    continue
                self.apply(health_reports.normalize(report))
            except (OSError, ValueError, TypeError, AttributeError, RecursionError) as exc:
                log(f"health report {shown} unreadable: {health_reports.clip(exc)}")
                self.rejected.add(name)
            except RequestError as exc:
                log(f"health report {shown} refused: {health_reports.clip(exc)}")
                self.rejected.add(name)
        if self.rejected:
            self.prune()

    def read_source(self) -> None:
        """The cluster owner's health source (``health.source``, named at create: an NHC cron job's folder
        on the head node): each new or rewritten ``*.json`` report there is signed into ``health/`` and
        applied, when the folder and the file belong to root or this scheduler's user and no one else can
        write them (a job's files never qualify by being there: the folder is outside the share)."""
        source = (self.cluster.cfg.get("health") or {}).get("source")
        if not isinstance(source, str) or not source:
            return
        try:
            folder = os.stat(source)
            why = health_reports.untrusted_path(source)
            if why is None and not stat.S_ISDIR(folder.st_mode):
                why = "not a folder"
            names = sorted(n for n in os.listdir(source) if n.endswith(".json")) if why is None else []
            names = names[-SOURCE_FILES:]  # a tool's few files: a flood is not read each loop
        except OSError as exc:
            why, names = health_reports.clip(exc), []
        if why != self.source_refused:
            self.source_refused = why
            if why is not None:
                shown = health_reports.clip(source, 200)
                log(f"health source {shown} not trusted: {why}; its reports are ignored")
        for name in names:
            path = os.path.join(source, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            seen = (info.st_mtime_ns, info.st_size)
            if self.sourced.get(name) == seen:
                continue
            self.sourced[name] = seen
            shown = health_reports.clip(name, 80)
            try:
                report = health_reports.normalize(health_reports.read_bounded(path, owned=True))
            except (OSError, ValueError, TypeError, AttributeError, RecursionError, RequestError) as exc:
                log(f"health source report {shown} ignored: {health_reports.clip(exc)}")
                continue
            report.setdefault("started", info.st_mtime)
            log(f"health source report {shown} applied")
            self.write({**report, "trigger": "source"})
        self.sourced = {n: self.sourced[n] for n in names if n in self.sourced}  # only files still there

    def apply(self, report: Mapping[str, Any]) -> None:
        """A signed, bounded report: each node it names follows it, unless a newer report already did."""
        bad = {str(k): health_reports.clip(v) for k, v in dict(report.get("unusable") or {}).items()}
        rank = RANK.get(str(report.get("level")), 1)
        started = float(report.get("started") or 0.0)
        for node in [str(n) for n in report.get("nodes") or []]:
            if started < self.as_of.get(node, 0.0):
                continue  # older than what this node already follows: a later pass is never undone
            self.as_of[node] = started
            if node in bad:
                self.passed.pop(node, None)
                if self.unusable.get(node) != bad[node]:
                    self.unusable[node] = bad[node]
                    self.cluster.event({"kind": "unusable", "node": node, "reason": bad[node]}, "health")
            else:
                self.passed[node] = max(self.passed.get(node, 0), rank)
                if self.unusable.pop(node, None) is not None:
                    self.cluster.event({"kind": "healthy", "node": node}, "health")
        if report.get("trigger") == "join":
            self.back_off(report)
        else:  # the admin's (or a job's) check decides these nodes: no join retry overrides it
            for node in report.get("nodes") or []:
                if self.as_of.get(node) == started:
                    self.retry.pop(node, None)
