"""The contract between the client and the node code: every share path under a root and every record both
sides read and write, spelled once (standard library only; the client imports it as
``batchai_sdk.node.protocol``, the nodes as ``batchai_node.protocol``).

A record or path change is one diff here, seen by both halves. Each record reads the keys older versions
wrote for one version (``wrapper_host``/``wrapper_pid`` and ``scheduler`` became ``reporter``).

The tree under a share root (the client's root is ``""``, a node's is where it mounts the share)::

    .batchai/clusters/<cluster>/{cluster,nodes,size}.json, events.jsonl, events.d/
    .batchai/node/<digest>/batchai_node/
    .batchai/experiments/<exp>/experiment.json
    .batchai/experiments/<exp>/jobs/<job>/{job,status}.json, wd/, run/{launch,result}.json,
                                          run/evicted-<node>.json
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, fields, replace
from typing import Any

# ctl: the request's operations (spelled in names.py, which ctl loads without this module's dataclasses)
from .names import OP_HEALTH as OP_HEALTH
from .names import OP_JOB as OP_JOB
from .names import OP_NODES as OP_NODES
from .names import OP_PING as OP_PING
from .names import OP_SUBMIT as OP_SUBMIT
from .names import OP_TERMINATE as OP_TERMINATE
from .names import OPS as OPS

META = ".batchai"
WORKSPACE_RECORD = "workspace.json"
CLUSTER_RECORD = "cluster.json"
NODES_RECORD = "nodes.json"  # which job holds each node (the scheduler)
SIZE_RECORD = "size.json"  # with autoscale: the nodes up now (the scheduler)
EVENTS_RECORD = "events.jsonl"  # every scaling decision (the scheduler)
HEAD_RECORD = "head.json"  # which node's scheduler holds the cluster now (the scheduler, when it starts)
CLIENT_EVENTS = "events.d"  # a client's scaling decision, one file each
HEARTBEAT_KEY = "heartbeat"  # in nodes.json: the queue's heartbeat (queued jobs' records are not rewritten)
HEALTH_REPORT = "health-check.json"  # in a job's logs: the health gate's report on its nodes, when it asked
HEALTH_DIR = "health"  # the health gate's reports, one file each (the scheduler, check_nodes, any tool)
EXPERIMENT_RECORD = "experiment.json"
JOB_RECORD = "job.json"
STATUS_RECORD = "status.json"
LAUNCH_CONFIG = "launch.json"
RESULT_RECORD = "result.json"  # a launcher's outcome; also in its node-local folder on the head node
EVICTED_PREFIX = "evicted-"
SIMULATED_EVICTION_PREFIX = "simulate-eviction-"
HEAD_DISK_ERROR = "head_disk_error"  # in nodes.json while the scheduler's own disk refuses writes

# a launcher's node-local job folder (the scheduler's on the head node; the Batch task's working folder on
# Azure Batch): what it is given before it starts, and the mark it leaves as it goes (with RESULT_RECORD)
ASSIGNMENT_RECORD = "assignment.json"  # the nodes, the launch config's path, the attempt (and its tag)
SECRETS_RECORD = "secrets.json"  # the job's secret variables, 0600; removed once the job ends
PHASE_RECORD = "phase.json"  # the launcher's phase, pid and tag (recovery tells a begun attempt by it)

# ctl: the error codes of a refused request
E_EXISTS, E_CAPACITY, E_INVALID, E_UNAVAILABLE = "exists", "capacity", "invalid", "unavailable"
E_REQUEST_REUSED = "request_id_reused"  # a request_id already named a submit with other content


def eviction_marker(node: str) -> str:
    """The file name a node's eviction notice gets in the job's run folder."""
    return f"{EVICTED_PREFIX}{node}.json"


def simulated_eviction(node: str) -> str:
    """The file name of a simulated eviction (``cluster.simulate_eviction``) in the job's run folder."""
    return f"{SIMULATED_EVICTION_PREFIX}{node}.json"


FAULT_REQUEST_PREFIX = "fault-"  # a fault drill's request for one node (job.inject_fault), in the run folder
LOST_MARKER_PREFIX = "lost-"  # a node a drill took away (lose_node): the attempt ends as a lost node's


def fault_request(node: str) -> str:
    """The file name of a fault drill's request for ``node`` in the job's run folder."""
    return f"{FAULT_REQUEST_PREFIX}{node}.json"


def lost_marker(node: str) -> str:
    """The file name a node a drill took away (``lose_node``) leaves in the job's run folder."""
    return f"{LOST_MARKER_PREFIX}{node}.json"


def is_eviction_file(name: str, *, simulated: bool = False) -> bool:
    prefixes = (EVICTED_PREFIX, SIMULATED_EVICTION_PREFIX) if simulated else (EVICTED_PREFIX,)
    return name.startswith(prefixes) and name.endswith(".json")


@dataclass(frozen=True)
class SharePaths:
    """The share's paths under ``root`` (``""``: share-relative, as the client's Share takes them; on a
    node, where it mounts the share). Names come validated from the caller."""

    root: str = ""

    @classmethod
    def at_meta(cls, meta_root: str) -> SharePaths:
        """The paths of a share whose ``.batchai`` folder is ``meta_root`` (as a node sees it)."""
        return cls(posixpath.dirname(meta_root.rstrip("/")))

    def _p(self, *parts: str) -> str:
        return posixpath.join(self.root, META, *parts) if self.root else posixpath.join(META, *parts)

    def meta(self) -> str:
        return self._p()

    def workspace_record(self) -> str:
        return self._p(WORKSPACE_RECORD)

    def clusters_dir(self) -> str:
        return self._p("clusters")

    def cluster_dir(self, cluster: str) -> str:
        return self._p("clusters", cluster)

    def cluster_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), CLUSTER_RECORD)

    def nodes_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), NODES_RECORD)

    def size_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), SIZE_RECORD)

    def head_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), HEAD_RECORD)

    def events_record(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), EVENTS_RECORD)

    def client_events_dir(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), CLIENT_EVENTS)

    def health_dir(self, cluster: str) -> str:
        return posixpath.join(self.cluster_dir(cluster), HEALTH_DIR)

    def node_code_dir(self, digest: str) -> str:
        return self._p("node", digest, "batchai_node")

    def experiments_dir(self) -> str:
        return self._p("experiments")

    def experiment_record(self, experiment: str) -> str:
        return self._p("experiments", experiment, EXPERIMENT_RECORD)

    def jobs_dir(self, experiment: str) -> str:
        return self._p("experiments", experiment, "jobs")

    def job_dir(self, experiment: str, job: str) -> str:
        return posixpath.join(self.jobs_dir(experiment), job)

    def job_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), JOB_RECORD)

    def status_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), STATUS_RECORD)

    def job_wd(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), "wd")

    def run_dir(self, experiment: str, job: str) -> str:
        return posixpath.join(self.job_dir(experiment, job), "run")

    def launch_config(self, experiment: str, job: str) -> str:
        return posixpath.join(self.run_dir(experiment, job), LAUNCH_CONFIG)

    def result_record(self, experiment: str, job: str) -> str:
        return posixpath.join(self.run_dir(experiment, job), RESULT_RECORD)

    def job_output_root(self, prefix: str | None, experiment: str, job: str) -> str:
        """Where the job's logs and outputs go: under ``prefix`` (share-relative), ``.batchai`` by default."""
        base = posixpath.join(self.root, prefix or META) if self.root else (prefix or META)
        return posixpath.join(base, "experiments", experiment, "jobs", job)


@dataclass(frozen=True)
class Reporter:
    """Who holds a job once a scheduler accepted it, and writes its status record: our scheduler or the
    Slurm step (``host``/``pid``), or a scheduling service that runs it (``service``: ``azure-batch``,
    ``slurm``) whose state the client reads back into the record."""

    host: str | None = None
    pid: int | None = None
    job_id: int | None = None  # the scheduler's row id (its node-local job folder is named by it)
    service: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "pid": self.pid}
        if self.job_id is not None:
            out["job_id"] = self.job_id
        if self.service is not None:
            out["service"] = self.service
        return out

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Reporter | None:
        """From ``reporter``; older records: ``scheduler`` (a dict, or a service's name as Batch and Slurm
        wrote it) or ``wrapper_host``/``wrapper_pid``."""
        raw = data.get("reporter") or data.get("scheduler")
        if isinstance(raw, dict):
            return cls(
                _str(raw.get("host")), _int(raw.get("pid")), _int(raw.get("job_id")), _str(raw.get("service"))
            )
        if isinstance(raw, str) and raw:
            return cls(service=raw)
        if data.get("wrapper_host") is not None or data.get("wrapper_pid") is not None:
            return cls(_str(data.get("wrapper_host")), _int(data.get("wrapper_pid")))
        return None


# why a queued job waits (PendingDoc.kind): the scheduler's, Slurm's squeue Reason and Azure Batch's states
# mapped onto one set of words (docs/pending.md)
WAITING_FOR_NODES = "waiting_for_nodes"  # the nodes it needs are busy; the jobs ahead go first
PRIORITY = "priority"  # a higher-priority job that came later goes first
RESERVED = "reserved"  # nodes are free but kept for the job ahead (its start would be delayed)
NODES_UNHEALTHY = "nodes_unhealthy"  # too few nodes pass the health gate; nodes and checks named
NODES_DOWN = "nodes_down"  # nodes it needs stopped answering
PREPARING_NODES = "preparing_nodes"  # nodes are being checked or set up before it can start
SCALING_UP = "scaling_up"  # the cluster is growing for it
CLUSTER_AT_ZERO = "cluster_at_zero"  # the cluster has no nodes and nothing will grow it
QUOTA = "quota"  # a quota or limit (cores, QOS, account) holds it back
MOUNT_UNAVAILABLE = "mount_unavailable"  # a storage it mounts cannot be reached
HELD = "held"  # held by a user or an admin (Slurm)
DEPENDENCY = "dependency"  # waits for another job or a begin time (Slurm)
SUBMITTED = "submitted"  # not yet considered by the scheduler
OTHER = "other"  # the backend's own words, in ``message``
PENDING_KINDS = (
    WAITING_FOR_NODES,
    PRIORITY,
    RESERVED,
    NODES_UNHEALTHY,
    NODES_DOWN,
    PREPARING_NODES,
    SCALING_UP,
    CLUSTER_AT_ZERO,
    QUOTA,
    MOUNT_UNAVAILABLE,
    HELD,
    DEPENDENCY,
    SUBMITTED,
    OTHER,
)
AHEAD_SHOWN = 5  # PendingDoc.ahead names at most this many jobs (ahead_count says how many there are)


@dataclass(frozen=True)
class PendingDoc:
    """Why a queued job waits and until when: a kind of ``PENDING_KINDS``, a sentence, its place in the
    queue (1: next), the jobs ahead (the first ``AHEAD_SHOWN``), the nodes that hold it back (and why, for
    unhealthy ones), and when it should start (ISO time, from the running jobs' wall clock limits; None
    where a job it waits for has none)."""

    kind: str
    message: str
    position: int | None = None
    ahead: list[str] = field(default_factory=list)
    ahead_count: int = 0
    nodes: dict[str, str] = field(default_factory=dict)  # node -> why it holds the job back
    estimated_start: str | None = None
    source: str | None = None  # the backend's own word (Slurm's Reason, Azure Batch's state)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.position is not None:
            out["position"] = self.position
        if self.ahead_count:
            out.update(ahead=list(self.ahead), ahead_count=self.ahead_count)
        if self.nodes:
            out["nodes"] = dict(self.nodes)
        if self.estimated_start is not None:
            out["estimated_start"] = self.estimated_start
        if self.source is not None:
            out["source"] = self.source
        return out

    @classmethod
    def from_dict(cls, data: Any) -> PendingDoc | None:
        """The record, or None for anything that is not one (a reader never fails on it)."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        nodes = data.get("nodes")
        ahead = data.get("ahead")
        return cls(
            kind=str(data["kind"]),
            message=str(data.get("message") or data["kind"]),
            position=_int(data.get("position")),
            ahead=[str(a) for a in ahead] if isinstance(ahead, list) else [],
            ahead_count=_int(data.get("ahead_count")) or 0,
            nodes={str(k): str(v) for k, v in nodes.items()} if isinstance(nodes, dict) else {},
            estimated_start=_str(data.get("estimated_start")),
            source=_str(data.get("source")),
        )


@dataclass(frozen=True)
class StatusDoc:
    """A job's ``status.json``. A client writes the first (``queued``, no reporter); a record with a
    reporter was written by the job's scheduler, or names the service that has it: that job was accepted
    and is no longer its client's (``accepted``: the one definition every reader uses)."""

    state: str
    creation_time: str | None = None
    heartbeat: str | None = None
    reporter: Reporter | None = None
    start_time: str | None = None
    end_time: str | None = None
    nodes: list[str] | None = None
    preparing: bool | None = None
    attempt: int | None = None
    attempts: list[dict[str, Any]] | None = None
    requeue_reason: str | None = None
    exit_code: int | None = None
    failure_reason: str | None = None
    tag: str | None = None  # the attempt's process tag: a scheduler with a new database fences by it
    notice: str | None = None  # observe mode's "possibly hung": the job goes on
    pending: PendingDoc | None = None  # a queued job: why it waits (the cluster's nodes.json has it fresh)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read

    @property
    def accepted(self) -> bool:
        return self.reporter is not None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or value is None:
                continue
            out[f.name] = value.to_dict() if isinstance(value, (Reporter, PendingDoc)) else value
        return out

    def updated(self, **changes: Any) -> StatusDoc:
        """This record with ``changes``: its own fields replaced, any other key kept in ``extra`` (a
        backend's ids); ``None`` clears either."""
        own = {f.name for f in fields(self)} - {"extra"}
        extra = dict(self.extra)
        for key, value in changes.items():
            if key not in own:
                if value is None:
                    extra.pop(key, None)
                else:
                    extra[key] = value
        kwargs = {k: v for k, v in changes.items() if k in own}
        return replace(self, extra=extra, **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatusDoc:
        known = {f.name for f in fields(cls)} - {"extra", "reporter", "pending"}
        old = {"scheduler", "wrapper_host", "wrapper_pid"}
        kwargs: dict[str, Any] = {k: data[k] for k in known if k in data}
        kwargs["state"] = str(data.get("state") or "queued")
        skip = known | old | {"reporter", "pending"}
        extra = {k: v for k, v in data.items() if k not in skip}
        pending = PendingDoc.from_dict(data.get("pending"))
        return cls(reporter=Reporter.from_record(data), pending=pending, extra=extra, **kwargs)


@dataclass(frozen=True)
class NodeHold:
    job: str
    phase: str

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "phase": self.phase}


@dataclass(frozen=True)
class NodesDoc:
    """A cluster's ``nodes.json``: which job holds each node (absent: free), the queue, the nodes that
    stopped answering, and since when nothing ran (None: no job ended yet)."""

    nodes: dict[str, NodeHold] = field(default_factory=dict)
    queued: list[str] = field(default_factory=list)
    down: list[str] = field(default_factory=list)
    unusable: dict[str, str] = field(default_factory=dict)  # failed the health gate: node -> why
    checking: list[str] = field(default_factory=list)  # the health gate is checking them
    health_reports: int = 0  # how many of the cluster's health reports the scheduler has applied
    idle_since: str | None = None
    has_idle_since: bool = True  # False: written by a scheduler too old to say
    head_disk_error: str | None = None  # the scheduler's own disk refuses writes (while it lasts)
    pending: dict[str, PendingDoc] = field(default_factory=dict)  # queued job key -> why it waits

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "nodes": {n: h.to_dict() for n, h in self.nodes.items()},
            "queued": list(self.queued),
            "down": list(self.down),
            "idle_since": self.idle_since,
        }
        if self.unusable:
            out["unusable"] = dict(self.unusable)
        if self.checking:
            out["checking"] = list(self.checking)
        if self.health_reports:
            out["health_reports"] = self.health_reports
        if self.head_disk_error is not None:
            out[HEAD_DISK_ERROR] = self.head_disk_error
        if self.pending:
            out["pending"] = {key: p.to_dict() for key, p in self.pending.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodesDoc:
        holds = data.get("nodes") or {}
        return cls(
            nodes={
                str(n): NodeHold(str(h.get("job", "")), str(h.get("phase", "running")))
                for n, h in holds.items()
                if isinstance(h, dict)
            },
            queued=[str(q) for q in data.get("queued") or []],
            down=[str(d) for d in data.get("down") or []],
            unusable={str(k): str(v) for k, v in (data.get("unusable") or {}).items()}
            if isinstance(data.get("unusable"), dict)
            else {},
            checking=[str(c) for c in data.get("checking") or []],
            health_reports=int(data.get("health_reports") or 0)
            if isinstance(data.get("health_reports"), int)
            else 0,
            idle_since=_str(data.get("idle_since")),
            has_idle_since="idle_since" in data,
            head_disk_error=_str(data.get(HEAD_DISK_ERROR)),
            pending=_pending_map(data.get("pending")),
        )


@dataclass(frozen=True)
class CtlReply:
    """A scheduler's reply: ``ok``, or the refusal's ``error`` code (``E_*``) and message; other keys
    (``id``, ``found``, ``state``...) as the operation gives them."""

    ok: bool
    error: str | None = None
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {**self.data, "ok": self.ok}
        if not self.ok:
            out.update(error=self.error, message=self.message)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CtlReply:
        rest = {k: v for k, v in data.items() if k not in ("ok", "error", "message")}
        return cls(bool(data.get("ok")), _str(data.get("error")), _str(data.get("message")), rest)

    @classmethod
    def refused(cls, error: str, message: str) -> CtlReply:
        return cls(False, error, message)


def _pending_map(data: Any) -> dict[str, PendingDoc]:
    if not isinstance(data, dict):
        return {}
    read = {str(k): PendingDoc.from_dict(v) for k, v in data.items()}
    return {k: v for k, v in read.items() if v is not None}


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
