"""The cluster's scheduler: one process per cluster, on its head node, the one authority over its queue.

It keeps the queue and the node assignments in SQLite in a node-local folder that only it opens (never
on the share: SQLite's locking is unreliable on SMB/NFS), takes requests on a Unix socket beside it
(``ctl``), starts one launcher per job attempt, watches it, ends every process of a job on every node
(by the job's tag, procs.py) before its nodes count as free, and publishes each job's status and the
nodes' assignments to the share for readers. It exits once nothing is queued, running or unpublished.

``Scheduler`` composes its parts, each owning its own state and given only the collaborators it needs:
the head node's state folder (``store.Store``: cluster.json, sched.db, job folders), the cluster's nodes
(``cluster.Cluster``), how an attempt ends (``attempt_end.AttemptEnds``), the watches over jobs and nodes
(``health.HangWatch``, ``health.DownNodes``), the health gate (``gate.NodeGate``), what it publishes
(``publish.Publisher``), autoscale (``scaling.AutoScaler``), the spare launcher (``spares.Spares``) and
the socket (``server.RequestServer``); recovery after a restart (``recovery.py``), the queue's order
(``policy/queue.py``), quarantine and pruning are functions over the store. No part imports this module.
This module takes requests, starts, watches and stops launchers, and runs the loop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from ..agent.keeper import Agents
from ..common import TAG_VAR, load_or_none, write_json_atomic
from ..job import procs
from ..policy import retries
from ..policy.queue import Holding, Waiting, plan, priority_rank
from ..protocol import requests
from ..protocol.cluster import ClusterConfig, NodeConfig
from ..protocol.fields import RequestError
from ..protocol.launch import Assignment, LaunchConfig, Phase
from ..protocol.names import (
    OP_HEALTH,
    OP_JOB,
    OP_NODES,
    OP_PING,
    OP_SUBMIT,
    OP_TERMINATE,
    PROTOCOL,
    SCHED_SOCKET,
)
from ..protocol.paths import ASSIGNMENT_RECORD, PHASE_RECORD, RESULT_RECORD
from ..protocol.requests import E_REQUEST_REUSED, JobRef, SubmitRequest
from . import (
    api,
    attempt_end,
    head,
    health,
    health_reports,
    lost,
    prune,
    publish,
    quarantine,
    recovery,
    scaling,
    spares,
    standby,
)
from .api import request_digest
from .cluster import Cluster
from .gate import NodeGate
from .log import log
from .mount_waits import MountWaits
from .server import RequestServer
from .spares import Spares
from .store import STARTING, JobExists, Store, iso

__all__ = ["Holding", "RequestError", "Scheduler", "Waiting", "plan", "run"]

LOOP = 0.05
SOCKET_CHECK_S = 0.25  # how often the loop checks that its socket path is still its own
TERM_GRACE = 10.0  # the launcher's own grace for the ranks, plus a margin before it is killed
IDLE_EXIT = 2.0
LOST_NODE_GRACE = 2.0


def idle_exit(cfg: ClusterConfig) -> float:
    """How long an idle scheduler waits before it exits (a configuration's null: the default)."""
    seconds = cfg.get("idle_exit_seconds")
    return IDLE_EXIT if seconds is None else float(seconds)


class Scheduler:
    """The queue's one authority on a head node: its state folder holds ``cluster.json`` and ``sched.db``."""

    def __init__(self, state_dir: str) -> None:
        self.store = Store(state_dir)
        if not self.store.created and head.held_elsewhere(self.store.cfg):
            log("the head lease names another node: this node's database is stale; rebuilt from the share")
            self.store.retire()
            self.store = Store(state_dir)
        self.cluster = Cluster(self.store)
        # job id → its launcher, for launchers this process started. Kept referenced: a dropped Popen is
        # reaped by subprocess's own cleanup, and its exit would go unseen.
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.pool_exec = concurrent.futures.ThreadPoolExecutor(max_workers=4)
        self.idle_since: float | None = None
        self.stopping = False
        self.gate = NodeGate(self.cluster, self.pool_exec)
        self.down = health.DownNodes(self.cluster, self.store, self.pool_exec)
        self.down.on_back = self.gate.forget  # a lost node passes the gate again before it takes a job
        self.mark_down(self.store.cfg)
        self.hangs = health.HangWatch(self.cluster, self.store, self.pool_exec, self.stop)
        self.ends = attempt_end.AttemptEnds(self.store, self.cluster, self.pool_exec, self.down, self.hangs)
        self.mount_waits = MountWaits()  # queued jobs whose storage is not there on this node
        self.publisher = publish.Publisher(self.store, self.cluster, self.down, self.gate, self.mount_waits)
        self.autoscaler = scaling.AutoScaler(self.cluster, self.store, self.gate, self.pool_exec)
        self.server: RequestServer | None = None
        self.sock_ino = 0  # the inode of the socket this process bound (run)
        self.spares = Spares()
        self.agents = Agents(log)  # the SSH nodes' warm agents (agent/keeper.py)
        self.lost = lost.LostWatch(self.cluster, self.agents, self.pool_exec, self.stop)
        self.pidfds: dict[int, int] = {}  # job id → a descriptor readable once its launcher exits
        self.step_errors: dict[str, str] = {}
        self.faulted = False  # a step of this pass met a disk fault
        self.pruned_at = 0.0
        self.lease = head.HeadLease(self.store.cfg)
        self.ticked = time.monotonic()  # when the loop last came round (the head lease's beat looks)
        self.stepped_down = False  # another node's scheduler took the cluster over (head.py)
        self.standbys = standby.Standbys(self.store.state_dir)  # the other nodes', should this one be lost
        quarantine.quarantine_bad_rows(self.store, self.node_ids())
        self.rebuilt = recovery.rebuild_from_share(self.store) if self.store.created else 0

    # -- what its callers read (tests, tools): the Store's ------------------------------------------
    @property
    def cfg(self) -> ClusterConfig:
        """The cluster's configuration."""
        return self.store.cfg

    def job_state_dir(self, job_id: int) -> str:
        """The job's folder on this node: assignment, secrets, the launcher's result and log."""
        return self.store.job_state_dir(job_id)

    # -- requests -------------------------------------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one request from ``ctl``; a refused one raises ``RequestError`` before any change."""
        request = api.check_request(request)
        if request.get("cluster"):
            self.set_cluster(request["cluster"])
        op = request["op"]
        if op == OP_SUBMIT:
            return self.submit(requests.check_submit(request))
        if op == OP_TERMINATE:
            return self.terminate(requests.check_job_ref(request))
        if op in (OP_PING, OP_NODES):  # the wire's version: a client of another one stops there
            return {"ok": True, "pid": os.getpid(), "protocol": PROTOCOL}
        if op == OP_JOB:
            return self.job_state(requests.check_job_ref(request))
        if op == OP_HEALTH:  # the admin's report: the scheduler signs it, keeps it and applies it
            self.gate.write(health_reports.check_request_report(request["report"]))
            self.publish()
            return {"ok": True}
        raise RequestError("invalid", f"unknown request {op!r}")

    def set_cluster(self, cfg: ClusterConfig) -> None:
        """Take the cluster's configuration a request carried; fail queued jobs it no longer fits."""
        if not self.cluster.configure(cfg):
            return
        self.mark_down(cfg)
        total = self.cluster.capacity()
        for row in [r for r in self.store.jobs("queued") if r["node_count"] > total]:
            self.store.finish(
                row,
                "failed",
                None,
                f"the cluster was resized to {total} node(s) while the job waited; it needs "
                f"{row['node_count']} (resize the cluster and submit it again)",
            )

    def mark_down(self, cfg: ClusterConfig | None) -> None:
        """The nodes a client found silent as it revived this scheduler (its head node lost, say): out of
        placement until a probe reaches them, as nodes that stopped answering during a job are."""
        for node_id in (cfg.get("down") if cfg is not None else None) or []:
            if node_id not in self.down:
                self.down.mark(node_id)
                log(f"node {node_id} did not answer the client: no job goes there until it answers")

    def submit(self, request: SubmitRequest) -> dict[str, Any]:
        """Queue a job (once per ``request_id``), keep its secrets here only, and start what can start."""
        experiment, name, node_count = request["experiment"], request["name"], request["node_count"]
        if node_count > self.cluster.capacity():
            raise RequestError(
                "capacity", f"the job needs {node_count} node(s); the cluster has {self.cluster.capacity()}"
            )
        request_id = str(request.get("request_id") or uuid.uuid4().hex)
        digest = request_digest(request)
        again = self.store.by_request(request_id)
        if again:  # a replay: the same request is answered as before; other content under its id is refused
            if again["request_digest"] not in (None, digest):
                raise RequestError(
                    E_REQUEST_REUSED,
                    f"request_id {request_id} already named job {again['key']} with other content;"
                    " this request was not queued (send it with a new request_id)",
                )
            return {"ok": True, "id": again["id"], "key": again["key"], "repeated": True}
        try:  # the row and its secrets file, or neither
            job_id = self.store.add_job(
                experiment=experiment,
                name=name,
                node_count=node_count,
                request_id=request_id,
                request_digest=digest,
                secrets=request["secrets"],
                wall=request.get("max_wall_clock_seconds"),
                creation_time=request.get("created"),
                hang=request.get("hang_timeout"),
                hang_notice=request.get("hang_notice"),
                max_retries=request["max_retries"],
                retry_codes=request["retry_on_exit_codes"],
                max_cost=request.get("max_cost"),
                price=request.get("price"),
                priority=priority_rank(request.get("scheduling_priority")),
            )
        except JobExists as exc:
            raise RequestError("exists", str(exc)) from exc
        log(f"queued {experiment}/{name} (id {job_id}, {node_count} node(s))")
        try:  # the job is accepted now: a disk fault from here on is the loop's to retry, not a refusal
            self.schedule()
            self.publish()
        except (sqlite3.Error, OSError) as exc:
            self.fault(exc)
        return {"ok": True, "id": job_id, "key": f"{experiment}/{name}"}

    def job_state(self, request: JobRef) -> dict[str, Any]:
        """What this scheduler holds of a job, whatever the share shows (a full share stops its writes,
        not its work): found, and the state, exit code, reason and end it would publish."""
        rows = self.store.runs(f"{request['experiment']}/{request['name']}")
        if not rows:
            return {"ok": True, "found": False}
        doc = publish.status_doc(rows[-1])
        keys = ("state", "exit_code", "failure_reason", "end_time")
        return {"ok": True, "found": True, **{k: doc[k] for k in keys if k in doc}}

    def terminate(self, request: JobRef) -> dict[str, Any]:
        """End a queued job now, or stop a running one (its launcher gets SIGTERM)."""
        key = f"{request['experiment']}/{request['name']}"
        row = self.store.active_run(key)
        if row is None:
            return {"ok": True, "found": False}
        if row["state"] == "queued":
            self.store.finish(row, "terminated", None, "terminated by the user while queued")
        elif row["state"] == "running" and row["stop_state"] is None:
            self.stop(row, "terminated", "terminated by the user")
        self.publish()
        return {"ok": True, "found": True}

    # -- job lifecycle --------------------------------------------------------------------------------
    def schedule(self) -> None:
        """Start what can start now (see ``plan``)."""
        held = self.store.held()
        blocked = self.gate.blocked()
        free = [
            n
            for n in self.cluster.nodes()
            if n["id"] not in held and n["id"] not in self.down and n["id"] not in blocked
        ]
        self.mount_waits.recheck()  # a job whose storage came back takes part in this pass's plan
        if not free:  # nothing can start: the queue, however long, need not be read
            return
        rows = {r["id"]: r for r in self.store.jobs("queued")}
        self.mount_waits.recheck(rows)
        waits = self.mount_waits.held()
        queued = [
            Waiting(r["id"], r["node_count"], r["wall"], r["priority"])
            for r in rows.values()
            if r["id"] not in waits
        ]
        running = [
            Holding(
                len(json.loads(r["nodes"])), r["started"] + r["wall"] if r["wall"] and r["started"] else None
            )
            for r in self.store.jobs("running", "cleaning")
        ]
        for job_id, count in plan(queued, running, len(free), time.time()):
            launch = self.launch_of(rows[job_id])
            if not self.mount_waits.ready(job_id, launch, self.cluster.nodes()[0]["id"]):
                log(f"{rows[job_id]['key']} waits: its mounts {self.mount_waits.reasons()[job_id]}")
                continue  # it would only fail on them: it waits, named in its pending reason
            level, logs = self.job_health_level(launch)
            if not self.gate.ready(free[:count], level, copy_to=logs):
                break  # its nodes are being checked; the next plan sees which passed
            self.start(rows[job_id], free[:count])
            free = free[count:]

    def launch_of(self, row: sqlite3.Row) -> LaunchConfig | None:
        """The job's launch.json, as the head node mounts the share (None: unreadable)."""
        launch: LaunchConfig | None = load_or_none(
            self.cluster.share_paths().launch_config(row["experiment"], row["name"])
        )
        return launch if isinstance(launch, dict) else None

    @staticmethod
    def job_health_level(launch: LaunchConfig | None) -> tuple[str, str | None]:
        """The job's own ``health_check`` (launch.json), or "off" (the cluster's gate already ran), and
        the job's log folder, where the report of its check goes too."""
        if launch is None:
            return "off", None
        return str(launch.get("health_check") or "off"), launch.get("stdouterr_dir")

    def start(self, row: sqlite3.Row, nodes: list[NodeConfig]) -> None:
        """Start the job's launcher on ``nodes`` with a fresh tag for this attempt."""
        job_id = row["id"]
        argv = [self.cfg["python"], "-S", self.cfg["node_main"], "launch"]
        env = dict(os.environ)
        env.update(self.cfg.get("env", {}))
        spare = self.spares.take(argv, env) if self.server is not None else None
        tag = spare.tag if spare is not None else uuid.uuid4().hex
        job_dir = self.job_state_dir(job_id)
        os.makedirs(job_dir, mode=0o700, exist_ok=True)
        for stale in (RESULT_RECORD, PHASE_RECORD):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(job_dir, stale))
        assignment = Assignment(
            launch=self.cluster.share_paths().launch_config(row["experiment"], row["name"]),
            nodes=nodes,
            tag=tag,
            attempt=row["attempt"],
            node_main=self.cfg["node_main"],
        )
        write_json_atomic(os.path.join(job_dir, ASSIGNMENT_RECORD), assignment, sync=False)
        launch: LaunchConfig | None = load_or_none(assignment["launch"])
        env[TAG_VAR] = tag
        t = time.time()
        # Intent before action: the row says which tag this launch uses before the launcher exists, so a
        # scheduler killed in between finds it by that tag (recovery) instead of starting it again.
        self.store.update(
            job_id,
            state="running",
            started=t,
            start_time=iso(t),
            nodes=json.dumps([n["id"] for n in nodes]),
            tag=tag,
            launcher_pid=None,
            phase=STARTING,
            stdouterr=launch.get("stdouterr_dir") if isinstance(launch, dict) else None,
            notice=None,
        )
        try:
            if spare is not None and spare.go(job_dir):
                proc = spare.proc
            else:
                with open(os.path.join(job_dir, "launcher.log"), "ab") as out:
                    proc = subprocess.Popen(
                        [*argv, job_dir],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=out,
                        env=env,
                        start_new_session=True,
                    )
        except OSError as exc:
            self.store.finish(row, "failed", None, f"could not start the job's launcher: {exc}")
            return
        self.children[job_id] = proc
        self.watch_exit(job_id, proc.pid)
        self.store.update(job_id, launcher_pid=proc.pid, phase="preparing")
        self.hangs.started(job_id)
        log(f"started {row['key']} on {', '.join(n['id'] for n in nodes)} (launcher pid {proc.pid})")
        if self.server is not None:  # the next job's launcher, started after this one's hand-off
            self.spares.refill(argv, {k: v for k, v in env.items() if k != TAG_VAR})

    def stop(self, row: sqlite3.Row, state: str, reason: str, cause: str | None = None) -> None:
        """Ask the job's launcher to stop; the job ends in ``state`` once its nodes are clean."""
        self.store.update(
            row["id"], stop_state=state, stop_reason=reason, stop_sent=time.time(), stop_cause=cause
        )
        pid = self.launcher_pid(row)
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)

    def launcher_pid(self, row: sqlite3.Row) -> int | None:
        """The job's launcher: as recorded, or this process's child whose pid a failed write left out."""
        child = self.children.get(row["id"])
        return int(row["launcher_pid"]) if row["launcher_pid"] else (child.pid if child else None)

    def watch(self) -> None:
        """Launchers that ended, stops that take too long, wall clocks, phases."""
        for job_id, proc in list(self.children.items()):
            code = proc.poll()
            if code is not None:
                self.ends.launcher_ended(job_id, code)
                del self.children[job_id]  # only once recorded: a write that failed is tried again
                self.unwatch_exit(job_id)
        t = time.time()
        for row in self.store.jobs("running"):
            pid = row["launcher_pid"]
            if row["id"] not in self.children and not attempt_end.launcher_alive(pid, row["tag"]):
                self.ends.launcher_ended(row["id"], None)
                continue
            if row["stop_state"] is None and row["wall"] and t - row["started"] > row["wall"]:
                self.stop(
                    row,
                    "failed",
                    f"maxWallClockTime of {row['wall']:g}s exceeded; the job was terminated",
                    retries.EndCause.WALL_CLOCK.value,
                )
            elif row["stop_state"] is None:
                self.lost.check(row)
                if row["max_cost"] and row["price"] is not None:
                    health.check_cost(row, t, self.stop)
                if (row["hang"] or row["hang_notice"]) and row["stdouterr"]:
                    self.hangs.check(row, t)
            elif row["stop_sent"] and t - row["stop_sent"] > stop_grace(row):
                victim = self.launcher_pid(row)
                if victim:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(victim, signal.SIGKILL)
            if row["phase"] != "running":
                phase: Phase | None = load_or_none(os.path.join(self.job_state_dir(row["id"]), PHASE_RECORD))
                if isinstance(phase, dict) and phase.get("phase") and phase["phase"] != row["phase"]:
                    self.store.update(row["id"], phase=phase["phase"])

    def watch_exit(self, job_id: int, pid: int) -> None:
        """Wake the loop the moment the launcher exits (a pidfd in its selector), not a tick later."""
        if self.server is None or not hasattr(os, "pidfd_open"):
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # an older kernel: the loop's tick finds the exit
        self.pidfds[job_id] = fd
        self.server.register(fd, lambda: None)

    def unwatch_exit(self, job_id: int) -> None:
        fd = self.pidfds.pop(job_id, None)
        if fd is not None:
            if self.server is not None:
                self.server.unregister(fd)
            os.close(fd)

    def adopt(self) -> None:
        """After a restart on the same node: take back the launchers and cleanups it left (recovery)."""
        recovery.adopt(self.store, self.ends)

    def reap_cleaned(self) -> None:
        """Conclude the jobs whose nodes are now clean; clean again where processes survived."""
        self.ends.reap_cleaned()

    def publish(self) -> None:
        """Write changed job records and node assignments to the share; a failed write is retried later."""
        self.publisher.publish()

    # -- the loop -------------------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing queued, running, unpublished, being cleaned, scaled or waited for."""
        return (
            not self.store.busy()
            and not self.ends.busy()
            and not self.autoscaler.busy()
            and not self.down.busy()
            and not self.gate.busy()
        )

    def serve(self, listener: socket.socket) -> int:
        """The loop: requests, launchers, cleanup, probes, autoscale, placement, publishing; until idle."""
        self.server = RequestServer(listener, self.answer)
        self.ends.wake = self.server.wake
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        self.adopt()
        spares.sweep(self.store.state_dir)
        if self.cfg.get("python") and self.cfg.get("node_main"):  # the first job's launcher, started now
            env = {**os.environ, **self.cfg.get("env", {})}
            self.spares.refill([self.cfg["python"], "-S", self.cfg["node_main"], "launch"], env)
        if self.cfg.get("ssh_command"):
            for node in self.cluster.nodes():
                self.pool_exec.submit(health.warm_connection, self.cluster, node["address"])
        checked = time.monotonic()
        self.lease.beat_in_background(lambda: self.ticked)
        while not self.stopping:
            self.ticked = time.monotonic()
            if time.monotonic() - checked > SOCKET_CHECK_S:
                checked = time.monotonic()
                if self.store.removed():
                    log("this scheduler's folder was removed: exiting")
                    break
                self.step("socket", self.keep_socket)
                self.step("head", self.keep_lease)
                if self.stepped_down:
                    break
                self.step("standbys", lambda: self.standbys.tick(self.cfg, self.lease))
            self.faulted = False
            self.step("requests", lambda: self.server.poll(LOOP) if self.server else None)
            self.step("agents", self.keep_agents)
            self.step("watch", self.watch)
            self.step("cleanup", self.reap_cleaned)
            self.step("probes", self.down.probe)
            self.step("health gate", self.gate.tick)
            self.step("autoscale", self.autoscaler.tick)
            self.step("placement", self.schedule)
            # the queue head's MPI world, started ahead
            self.step("spare", lambda: self.spares.predict(self.store, self.cluster))
            self.step("publish", self.publish)
            if time.monotonic() - self.pruned_at > prune.EVERY_S:
                self.pruned_at = time.monotonic()
                self.step("prune", lambda: prune.prune(self.store))
            if self.faulted:
                continue  # outcomes wait in memory; never exit idle while the disk refuses them
            self.cleared()
            if self.idle():
                self.idle_since = self.idle_since or time.monotonic()
                if time.monotonic() - self.idle_since > idle_exit(self.cfg):
                    break
            else:
                self.idle_since = None
        self.server.shutdown()
        self.spares.close()
        self.agents.close()
        self.standbys.close()
        return 0

    def own_socket(self) -> bool:
        """Whether the socket path is still the socket this process bound."""
        try:
            info = os.lstat(SCHED_SOCKET)
        except OSError:
            return False
        return stat.S_ISSOCK(info.st_mode) and info.st_ino == self.sock_ino

    def keep_socket(self) -> None:
        """The socket path removed or replaced (a file, a link to another listener): bound again now, so a
        client waits a moment instead of failing, and never talks to what was put there."""
        if self.server is None or self.own_socket():
            return
        log("the scheduler's socket was removed or replaced: bound again")
        listener = bind_socket()
        self.sock_ino = os.lstat(SCHED_SOCKET).st_ino
        self.server.replace_listener(listener)

    def keep_lease(self) -> None:
        """Step down when another node's scheduler took the cluster over (head.py): end what this one's
        launchers still run, set the database aside, and leave the records to the new one."""
        other = self.lease.taken_over()
        if other is None:  # beaten meanwhile from the lease's own thread (beat_in_background)
            return
        log(
            f"node {other.get('node')}'s scheduler took the cluster over at {other.get('started')}:"
            " stepping down"
        )
        self.stepped_down = True
        self.lease.stop()
        for row in self.store.jobs("running", "cleaning"):
            pid = self.launcher_pid(row)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if row["tag"]:  # the launcher's mpirun and ranks here, then on the job's other nodes
                procs.reap(row["tag"], grace=1.0)
                self.ends.clean_nodes(row["tag"], json.loads(row["nodes"]))
        self.store.retire()

    def keep_agents(self) -> None:
        """The SSH nodes' agents: started where missing or dead, let go where no longer wanted."""
        self.agents.tick(self.cfg, [n["address"] for n in self.cluster.nodes()])

    def step(self, name: str, fn: Callable[[], object]) -> None:
        """One step of the loop; a failure is logged (once per distinct error), bad rows are quarantined,
        and the loop goes on: no request or record can end the scheduler. A disk or database that
        refuses writes is a fault (``fault``): reported, and the step tried again next pass."""
        try:
            fn()
            self.step_errors.pop(name, None)
        except (sqlite3.Error, OSError) as exc:
            with contextlib.suppress(sqlite3.Error):
                self.store.rollback()
            self.faulted = True
            self.fault(exc)
        except Exception as exc:
            self.store.rollback()
            if self.step_errors.get(name) != repr(exc):
                self.step_errors[name] = repr(exc)
                log(f"{name} failed: {exc!r}\n{traceback.format_exc()}")
            with contextlib.suppress(Exception):
                if quarantine.quarantine_bad_rows(self.store, self.node_ids()):
                    self.fence_quarantined()

    def node_ids(self) -> list[str]:
        """Every node of the cluster (held for a quarantined running job whose row lost its nodes)."""
        try:
            return [n["id"] for n in self.cluster.pool()]
        except Exception:  # a configuration not given yet: no node to hold
            return []

    def fence_quarantined(self) -> None:
        """A running job's row was quarantined: its launcher is no longer this process's to watch, and its
        nodes are cleaned (every process with its tag ended) before they are free."""
        running = {row["id"] for row in self.store.jobs("running")}
        for job_id in [j for j in self.children if j not in running]:
            self.children.pop(job_id, None)
            self.unwatch_exit(job_id)
        for row in self.store.jobs("cleaning"):
            if row["id"] not in self.ends.cleaning:
                self.ends.resume(row)

    def fault(self, exc: BaseException) -> None:
        """The head node's disk or database refused a write: stay up, say so once (in the log and in
        ``nodes.json`` on the share), keep what is in memory, and try the same step again next pass."""
        message = f"the scheduler's disk refused a write ({exc}); outcomes are kept in memory and retried"
        if message != self.publisher.fault_message:
            log(message)
            self.publisher.report_fault(message)

    def cleared(self) -> None:
        """A pass went through: a fault reported before is over."""
        if self.publisher.fault_message is not None:
            log("the scheduler's disk takes writes again")
            self.publisher.report_fault(None)

    def answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line from the socket; never raises."""
        try:
            return self.handle(api.parse(line))
        except RequestError as exc:
            return {"ok": False, "error": exc.code, "message": str(exc)}
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self.store.rollback()
            self.fault(exc)
            return {"ok": False, "error": "unavailable", "message": self.publisher.fault_message or str(exc)}
        except Exception as exc:
            self.store.rollback()
            log(f"request failed: {exc!r}\n{traceback.format_exc()}")
            return {"ok": False, "error": "internal", "message": f"the scheduler could not answer: {exc!r}"}


def stop_grace(row: sqlite3.Row) -> float:
    """Seconds a stopping launcher gets before it is killed: its ranks' grace and a margin, but only
    ``LOST_NODE_GRACE`` when a node of the job was lost (its ranks cannot checkpoint together any more,
    and mpirun waits on the lost node's daemon; the cleanup ends the rest by the job's tag)."""
    if row["stop_cause"] == retries.EndCause.NODE_LOST.value:
        return LOST_NODE_GRACE
    return TERM_GRACE + 5


def bind_socket() -> socket.socket:
    """The scheduler's listening socket at ``SCHED_SOCKET`` (in the state folder, the working directory),
    0600; whatever was at that path (a stale socket, a file or link put there) is removed first."""
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(SCHED_SOCKET) and not os.path.islink(SCHED_SOCKET):
            os.rename(SCHED_SOCKET, f"{SCHED_SOCKET}.replaced-{os.getpid()}-{time.time():.0f}")
        else:
            os.unlink(SCHED_SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SCHED_SOCKET)
    os.chmod(SCHED_SOCKET, 0o600)
    listener.listen(64)
    listener.setblocking(False)
    return listener


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
    listener = bind_socket()
    sched = Scheduler(state_dir)
    sched.sock_ino = os.lstat(SCHED_SOCKET).st_ino
    sched.lease.take()
    log(f"scheduler started (pid {os.getpid()}); rebuilt {sched.rebuilt} job(s) from the share")
    try:
        return sched.serve(listener)
    finally:
        if sched.own_socket():  # never another's: a scheduler that took over binds the path anew
            os.unlink(SCHED_SOCKET)
        if sched.server is not None:
            sched.server.listener.close()
        listener.close()
        sched.down.clear()  # what this process learned of lost nodes goes with it
        if sched.stepped_down:
            log("scheduler exiting: another node's scheduler holds the cluster")
        else:
            sched.publish()
            sched.lease.release()  # the standbys leave: nothing to take over
            log("scheduler exiting: nothing queued or running")
