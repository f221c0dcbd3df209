"""The records both sides read and write: a job's ``status.json`` (``StatusDoc``, its ``Reporter``, why a
queued job waits: ``PendingDoc``) and a cluster's ``nodes.json`` (``NodesDoc``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

HEARTBEAT_KEY = "heartbeat"  # in nodes.json: the queue's heartbeat (queued jobs' records are not rewritten)
HEAD_DISK_ERROR = "head_disk_error"  # in nodes.json while the scheduler's own disk refuses writes


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


def _pending_map(data: Any) -> dict[str, PendingDoc]:
    if not isinstance(data, dict):
        return {}
    read = {str(k): PendingDoc.from_dict(v) for k, v in data.items()}
    return {k: v for k, v in read.items() if v is not None}


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
