"""The client of a cluster's own scheduler (``node/scheduler/daemon.py``) on its head node, for the backends
whose nodes we run (local, SSH, Azure). Each call runs ``ctl`` on the head node through the backend's
runner: the request (secrets included) goes on stdin, the reply comes back on stdout.

The cluster's configuration (its nodes, probed, and everything ``cluster.json`` holds) travels with a submit,
a change of nodes and a health report, and otherwise only when ``ctl`` must start the scheduler: a control
call (a job's state, a terminate, a ping) carries a job reference and reaches the head node without a probe
of every node where the backend knows its head (``Backend.head_node``).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from .. import _layout as layout
from .._models import ClusterSpec, Node, parse_time
from .._staging import ensure_node_code as ensure_node_code  # re-exported (it lived here)
from .._staging import node_code as node_code
from ..exceptions import (
    AlreadyExistsError,
    BackendError,
    BatchAIError,
    CapacityError,
    ProtocolMismatchError,
    SSHError,
    ValidationError,
)
from ..launch import node_command, on_node
from ..node.protocol.cluster import ClusterConfig, HealthConfig, NodeConfig
from ..node.protocol.names import E_NEEDS_CLUSTER, PROTOCOL, SCHED_SOCKET
from ..node.protocol.records import NodesDoc, StatusDoc
from ..node.protocol.requests import (
    E_CAPACITY,
    E_EXISTS,
    E_INVALID,
    E_REQUEST_REUSED,
    E_UNAVAILABLE,
    JobRef,
    Reply,
    SubmitRequest,
    check_reply,
)
from ..share import Share
from ..vm_sizes import health_floors
from .base import Activity, Assignment, Backend, ClusterScheduler, JobRequest, LaunchTarget

log = logging.getLogger(__name__)
MAX_UNIX_PATH = 108  # AF_UNIX paths are capped at 108 bytes; ctl connects to a longer one by its short name
DIRECT_TIMEOUT = 60.0  # as ctl waits for the scheduler's reply


def with_cluster_heartbeat(
    share: Share, cluster: str, record: dict[str, Any] | None, *, key: str | None = None
) -> dict[str, Any] | None:
    """A queued job's record with the cluster's heartbeat when that is newer: the scheduler rewrites a
    queued job's ``status.json`` only when it changes, and beats once for the whole queue in
    ``nodes.json`` (a thousand queued jobs are not a thousand writes every few seconds). With the job's
    ``key`` (``experiment/name``), also why it waits: the queue's ``pending`` entry for it."""
    if not record or record.get("state") != "queued" or not StatusDoc.from_dict(record).accepted:
        return record
    doc = share.read_json_or_none(layout.SHARE.nodes_record(cluster)) or {}
    if key is not None and isinstance(doc.get("pending"), dict) and key in doc["pending"]:
        record = {**record, "pending": doc["pending"][key]}
    try:
        beat, own = parse_time(doc.get("heartbeat")), parse_time(record.get("heartbeat"))
    except (TypeError, ValueError):
        return record
    if beat is not None and (own is None or beat > own):
        return {**record, "heartbeat": beat.isoformat()}
    return record


class HeadNodeScheduler(ClusterScheduler):
    def __init__(self, backend: Backend, spec: ClusterSpec, nodes: tuple[Node, ...] | None = None) -> None:
        self.backend = backend
        self.spec = spec
        self._nodes = nodes
        self._revival: dict[str, Any] | None = None  # while ``revive`` calls: every node, the silent ones

    def nodes(self) -> tuple[Node, ...]:
        if self._nodes is None:
            status = self.backend.cluster_status(self.spec)
            self._nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
        return self._nodes

    def heads(self) -> tuple[Node, ...]:
        """The nodes to run the scheduler on, in order: the one whose scheduler holds the head lease
        (``head.json``, node/scheduler/head.py) while it answers, then the cluster's nodes that answer.
        A head node lost (powered off, cut off) is not among them, so the next node takes the scheduler
        over: it rebuilds the queue from the share and requeues the jobs that ran from their checkpoints."""
        nodes = self.nodes() or self.pool()
        if self.backend.kind != "ssh":
            return nodes
        holder = self.lease_holder()
        return tuple(sorted(nodes, key=lambda n: n.id != holder))

    def lease_holder(self) -> str | None:
        """The node whose scheduler holds the head lease (``head.json``; SSH clusters), where known."""
        if self.backend.kind != "ssh":
            return None
        raw = self.backend.share.read_json_or_none(layout.SHARE.head_record(self.spec.name))
        holder = raw.get("node") if isinstance(raw, dict) else None
        return holder if isinstance(holder, str) else None

    def target(self) -> LaunchTarget:
        return self.backend.launch_target(self.spec, self.nodes() or self.pool())

    def head(self) -> tuple[Node, ...]:
        """The nodes a control call needs, the head first: the probed ones once known, else the head the
        backend knows without a probe, else (local, Azure) the probed ones."""
        if self._nodes is None:
            head = self.backend.head_node(self.spec)
            if head is not None and self.lease_holder() in (None, head.id):  # not taken over elsewhere
                return (head,)
        return self.heads()

    def node_main(self, target: LaunchTarget) -> str:
        return on_node(target, posixpath.join(ensure_node_code(self.backend.share), "__main__.py"))

    def state_dir(self, target: LaunchTarget) -> str:
        return posixpath.join(target.temp_root, "scheduler", self.spec.name)

    def pool(self) -> tuple[Node, ...]:
        """Every node the scheduler may use: with autoscale, the nodes up to max_nodes (local, SSH)."""
        auto = self.spec.autoscale
        if auto is None or self.backend.scale_set(self.spec) is not None:
            return self.nodes()
        return self.backend.cluster_status(replace(self.spec, nodes=auto.max_nodes)).nodes

    def cluster_config(self, target: LaunchTarget) -> ClusterConfig:
        def described(nodes: tuple[Node, ...]) -> list[NodeConfig]:
            return [NodeConfig(id=n.id, address=n.address, machine=n.machine, slots=n.slots) for n in nodes]

        auto = self.spec.autoscale
        return ClusterConfig(
            cluster=self.spec.name,
            nodes=described(self.nodes()),
            pool=described(self.pool()),
            autoscale=auto.to_dict() if auto is not None else None,
            azure=self.backend.scale_set(self.spec) if auto is not None else None,
            ssh_command=list(target.ssh_command) if target.ssh_command is not None else None,
            python=target.python,
            node_main=self.node_main(target),
            meta_root=on_node(target, layout.META),
            cluster_dir=on_node(target, layout.SHARE.cluster_dir(self.spec.name)),
            env=dict(target.env),
            health=self.health_settings(target),
        )

    def configuration(self, heads: tuple[Node, ...]) -> ClusterConfig:
        """The configuration a request carries where it may start the scheduler: on SSH the node it starts
        on (``heads[0]``, the head lease's), and while ``revive`` runs every node, the silent ones down."""
        cluster = self.cluster_config(self.target())
        if heads and self.backend.kind == "ssh":  # where another node may take the scheduler over
            cluster["head"] = heads[0].id
        if self._revival is not None:
            every = [
                NodeConfig(id=n.id, address=n.address, machine=n.machine, slots=n.slots)
                for n in self._revival["nodes"]
            ]
            cluster["nodes"], cluster["pool"], cluster["down"] = every, every, list(self._revival["down"])
        return cluster

    def health_settings(self, target: LaunchTarget) -> HealthConfig:
        """What the health gate needs: its level, GPUs per node, and the VM size's all-reduce floors (on
        Azure, where the size is real; elsewhere it is a label and only the sniff test applies)."""
        node_busbw, link_busbw = (
            health_floors(self.spec.vm_size) if self.backend.kind == "azure" else (None, None)
        )
        settings = HealthConfig(level=self.spec.health_check, gpus=target.num_gpus)
        if node_busbw is not None:
            settings["node_busbw"] = node_busbw
        if link_busbw is not None:
            settings["link_busbw"] = link_busbw
        source = self.spec.health_source
        if source is not None:  # never on the share: every job can write there
            share = target.node_share_root.rstrip("/")
            if source == share or source.startswith(share + "/"):
                raise ValidationError(
                    "health_source", source, f"a folder outside the share ({share}), which jobs can write"
                )
            settings["source"] = source
        return settings

    def check_nodes(self, level: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Run the health gate across the cluster's nodes from its head node; returns its report, which
        is also written to the cluster's ``health/`` folder, where the scheduler applies it."""
        self.backend.prepare(self.spec, self.nodes() or self.pool())  # node setup: keys, ssh config
        target = self.target()
        cluster = self.cluster_config(target)
        nodes = cluster["nodes"] or cluster["pool"]
        command = node_command(target.python, cluster["node_main"], "gate", "run", env=target.env)
        request = json.dumps({"cluster": cluster, "nodes": nodes, "level": level})
        with self.backend.head_runner(self.spec, self.heads()) as runner:
            result = runner.run(command, timeout=timeout or 600, stdin=request)
        try:
            report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise BackendError(
                f"the health check of cluster {self.spec.name!r} gave no report: {result.describe()}"
            ) from exc
        self.report_health(report, timeout=timeout)
        return report

    def report_health(self, report: Mapping[str, Any], *, timeout: float | None = None) -> None:
        """Hand a health report to the cluster's scheduler, which signs it, keeps it in the cluster's
        ``health/`` folder and applies it: the one door for reports that change placement (a file written
        into that folder directly is ignored: jobs can write there)."""
        reply = self.call({"op": "health", "report": {**report, "trigger": "admin"}}, timeout=timeout)
        if not reply.get("ok"):
            message = str(reply.get("message", reply))
            if reply.get("error") == E_INVALID:
                raise ValidationError("report", "...", message)
            raise BackendError(f"the scheduler of cluster {self.spec.name!r} refused the report: {message}")

    def sync_health(self, *, timeout: float = 15.0) -> None:
        """Start the scheduler if it sleeps and wait (bounded) until it has applied every report in the
        cluster's ``health/`` folder: one a health tool wrote while no scheduler ran counts too."""
        share = self.backend.share
        folder = posixpath.dirname(layout.cluster_health_report(self.spec.name, "x"))
        if not share.exists(folder):
            return
        count = sum(1 for f in share.list(folder) if f.name.endswith(".json"))
        self.ensure_running()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = share.read_json_or_none(layout.SHARE.nodes_record(self.spec.name))
            if NodesDoc.from_dict(raw if isinstance(raw, dict) else {}).health_reports >= count:
                return
            time.sleep(0.2)

    def call(
        self,
        request: Mapping[str, Any],
        *,
        timeout: float | None = None,
        configure: bool = True,
        start_elsewhere: bool = True,
    ) -> Reply:
        """The scheduler's reply to ``request``. With ``configure`` the request carries the cluster's
        configuration (built from the nodes, probed); without, it carries only what it names, and the
        configuration goes only where ``ctl`` must start the scheduler (it answers ``needs_cluster``).
        ``start_elsewhere=False``: a head node that does not answer is an error naming it, not a scheduler
        started on the next node (a job's own calls: a takeover is ``revive``'s, which marks the head down
        so its jobs are fenced until it answers, not ended while they may run on there)."""
        if not configure:
            try:
                reply = self._call(request, self.head(), timeout, cluster=False)
            except SSHError:  # the head known without a probe does not answer: the probed nodes say who is
                if self._nodes is not None or not start_elsewhere:
                    raise
                reply = Reply(ok=False, error=E_NEEDS_CLUSTER)
            if reply.get("error") != E_NEEDS_CLUSTER:
                return reply
        return self._call(request, self.heads(), timeout, cluster=True)

    def _call(
        self, request: Mapping[str, Any], nodes: tuple[Node, ...], timeout: float | None, *, cluster: bool
    ) -> Reply:
        target = self.backend.launch_target(self.spec, nodes)
        node_main = self.node_main(target)
        if cluster:
            request = {**request, "cluster": self.configuration(nodes)}
        direct = self.call_direct(request, target, timeout)
        if direct is not None:
            return check_reply(direct)
        if not cluster and self.backend.kind == "local":  # none answers on its socket: ctl must start it
            return self._call(request, nodes, timeout, cluster=True)
        command = node_command(target.python, node_main, "ctl", self.state_dir(target), env=target.env)
        with self.backend.head_runner(self.spec, nodes) as runner:
            result = runner.run(command, timeout=timeout or 120, stdin=json.dumps(request))
        if not result.ok:
            raise BackendError(
                f"could not reach the scheduler of cluster {self.spec.name!r}: {result.describe()}"
            )
        try:
            return check_reply(json.loads(result.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError) as exc:
            raise BackendError(
                f"the scheduler of cluster {self.spec.name!r} gave no answer: {result.describe()}"
            ) from exc

    def call_direct(
        self, request: Mapping[str, Any], target: LaunchTarget, timeout: float | None
    ) -> dict[str, Any] | None:
        """The reply of a scheduler that runs on this machine, asked on its socket directly: no shell and
        no Python start (``ctl``) per call, which made up most of a submit's time and, 50 submits at once,
        kept the cores from the jobs starting (``benchmarks/bench_fast_paths.py calls``: 4 ms a call
        against 166 ms through ``ctl``). The head node is this machine where its nodes are reached without
        ssh (the launch target has no ``ssh_command``: the test the scheduler and the launcher make too).
        None when none answers there (not started, exiting, killed, or a socket path too long to connect
        to): ``ctl`` then starts it, as on every other backend. The scheduler validates the request
        (``api.check_request``) and keeps its ``cluster``."""
        if target.ssh_command is not None:
            return None
        sock = posixpath.join(self.state_dir(target), SCHED_SOCKET)
        if len(sock.encode()) >= MAX_UNIX_PATH or not os.path.exists(sock):
            return None
        from ..node.scheduler.ctl import send  # stdlib only; loaded on the first call, not at import

        return send(sock, dict(request), timeout=min(timeout or DIRECT_TIMEOUT, DIRECT_TIMEOUT))

    def submit(self, request: JobRequest, *, timeout: float | None = None) -> None:
        reply = self.call(
            SubmitRequest(
                op="submit",
                request_id=uuid.uuid4().hex,
                experiment=request.experiment,
                name=request.name,
                node_count=request.node_count,
                max_wall_clock_seconds=request.max_wall_clock_seconds,
                created=request.created,
                hang_timeout=request.hang_timeout,
                hang_notice=request.hang_notice,
                max_retries=request.max_retries,
                retry_on_exit_codes=list(request.retry_on_exit_codes),
                max_cost=request.max_cost,
                price=request.price_per_node_hour,
                scheduling_priority=request.scheduling_priority,
                secrets=dict(request.secrets),
            ),
            timeout=timeout,
        )
        if reply.get("ok") and reply.get("key") in (None, request.key):  # None: an older scheduler
            return
        if reply.get("ok"):  # "ok" for another job: this one is not queued
            raise BackendError(
                f"the scheduler of cluster {self.spec.name!r} answered for job {reply.get('key')!r}, "
                f"not {request.key!r}: the job was not queued",
                code=E_REQUEST_REUSED,
            )
        error, message = reply.get("error"), str(reply.get("message", reply))
        if error == E_REQUEST_REUSED:
            raise BackendError(f"the scheduler of cluster {self.spec.name!r}: {message}", code=error)
        if error == E_EXISTS:
            raise AlreadyExistsError(
                "job", request.name, f"experiment {request.experiment!r} (already running)"
            )
        if error == E_CAPACITY:
            raise CapacityError(self.spec.name, request.node_count, len(self.nodes()))
        if error == E_INVALID:
            raise ValidationError("job", request.key, message)
        raise BackendError(f"the scheduler of cluster {self.spec.name!r} refused the job: {message}")

    def terminate(self, experiment: str, name: str, *, timeout: float | None = None) -> bool:
        ref = JobRef(experiment=experiment, name=name)
        reply = self.call({"op": "terminate", **ref}, timeout=timeout, configure=False, start_elsewhere=False)
        if not reply.get("ok") or "found" not in reply:  # no answer is not "not found": the job is untouched
            raise BackendError(
                f"the scheduler of cluster {self.spec.name!r} did not answer the terminate of job "
                f"{experiment}/{name} ({reply.get('message', reply)}); the job was not terminated",
                code=str(reply.get("error") or E_UNAVAILABLE),
            )
        return bool(reply["found"])

    def job_state(self, experiment: str, name: str, *, timeout: float | None = None) -> Reply | None:
        ref = JobRef(experiment=experiment, name=name)
        reply = self.call({"op": "job", **ref}, timeout=timeout, configure=False, start_elsewhere=False)
        return reply if reply.get("ok") and "found" in reply else None  # an older scheduler cannot say

    def ensure_running(self) -> None:
        """Make sure the scheduler runs (restarting it if it died) and speaks this client's protocol
        (``ProtocolMismatchError`` otherwise). The ping carries no configuration unless it must start
        the scheduler: ``configure`` hands it over."""
        self.check_protocol(self.call({"op": "ping"}, configure=False))

    def configure(self, *, timeout: float | None = None) -> None:
        self.check_protocol(self.call({"op": "nodes"}, timeout=timeout))

    def check_protocol(self, reply: Reply) -> None:
        """A scheduler's answer to a ping or a change of nodes, from another version of the wire: refused.
        No answer is left to the next call to report, as before."""
        if not reply.get("ok"):
            return
        theirs = reply.get("protocol")
        if theirs != PROTOCOL:
            raise ProtocolMismatchError(self.spec.name, ours=PROTOCOL, theirs=theirs, pid=reply.get("pid"))

    def head_lost(self) -> bool:
        """Whether the node holding the head lease does not answer this client (SSH clusters)."""
        holder = self.lease_holder()
        return bool(holder) and holder not in {n.id for n in self.nodes()}

    def revive(self) -> None:
        """Node setup on the nodes that answer first (a node that booted afresh lost it with its disk, and
        the node taking the scheduler over runs the jobs' mpirun), then the scheduler, on the node that
        holds the head lease or else the first that answers (``heads``)."""
        if self.backend.kind != "ssh" or self.spec.autoscale is not None:
            self.ensure_running()
            return
        status = self.backend.cluster_status(self.spec)
        self._nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
        try:
            self.backend.prepare(self.spec, self._nodes)
        except BatchAIError as exc:  # the scheduler keeps out the nodes that fail it
            log.warning("cluster %s: node setup before the scheduler's restart: %s", self.spec.name, exc)
        # every node, those that do not answer marked down: the scheduler fences the lost head's jobs
        # there too and takes it back once it answers (a node left out would wait for a client's call)
        self._revival = {"nodes": status.nodes, "down": sorted(status.node_states)}
        try:
            self.ensure_running()
        finally:
            self._revival = None

    def update_nodes(self, nodes: tuple[Node, ...], *, timeout: float | None = None) -> None:
        self._nodes = nodes
        self.configure(timeout=timeout)

    def assignments(self) -> Mapping[str, Assignment]:
        raw = self.backend.share.read_json_or_none(layout.SHARE.nodes_record(self.spec.name))
        doc = NodesDoc.from_dict(raw if isinstance(raw, dict) else {})
        out = {node: Assignment(job=held.job, phase=held.phase) for node, held in doc.nodes.items()}
        for node in doc.down:  # stopped answering during a job; no job goes there
            out.setdefault(node, Assignment(job="", phase="unusable", reason="stopped answering"))
        for node, why in doc.unusable.items():  # failed the health gate
            out.setdefault(node, Assignment(job="", phase="unusable", reason=why))
        for node in doc.checking:  # being checked: preparing, as a node runs its start task
            out.setdefault(node, Assignment(job="", phase="preparing"))
        return out

    def activity(self) -> Activity | None:
        """From ``nodes.json``: busy while a node is held or a job queued, else idle since the last job's
        end. No record yet: no job was ever queued. A record without ``idle_since`` (written by an older
        scheduler) while nothing runs: unknown."""
        raw = self.backend.share.read_json_or_none(layout.SHARE.nodes_record(self.spec.name))
        if not isinstance(raw, dict):
            return Activity(busy=False)
        doc = NodesDoc.from_dict(raw)
        if doc.nodes or doc.queued:
            return Activity(busy=True)
        if not doc.has_idle_since:
            return None
        try:
            last = datetime.fromisoformat(doc.idle_since) if doc.idle_since else None
        except (TypeError, ValueError):
            return None
        return Activity(busy=False, last_end=last)
