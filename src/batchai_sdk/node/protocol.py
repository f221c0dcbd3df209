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
from dataclasses import dataclass, field, fields
from typing import Any

# ctl: the request's operations (spelled in names.py, which ctl loads without this module's dataclasses)
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
    """The process that writes a job's status record (its scheduler, or the Slurm step), and where."""

    host: str | None = None
    pid: int | None = None
    job_id: int | None = None  # the scheduler's row id (its node-local job folder is named by it)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "pid": self.pid}
        if self.job_id is not None:
            out["job_id"] = self.job_id
        return out

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Reporter | None:
        """From ``reporter``; older records: ``scheduler`` or ``wrapper_host``/``wrapper_pid``."""
        raw = data.get("reporter") or data.get("scheduler")
        if isinstance(raw, dict):
            return cls(_str(raw.get("host")), _int(raw.get("pid")), _int(raw.get("job_id")))
        if data.get("wrapper_host") is not None or data.get("wrapper_pid") is not None:
            return cls(_str(data.get("wrapper_host")), _int(data.get("wrapper_pid")))
        return None


@dataclass(frozen=True)
class StatusDoc:
    """A job's ``status.json``. A client writes the first (``queued``, no reporter); a record with a
    reporter was written by the job's scheduler: that job was accepted and is no longer its client's."""

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
            out[f.name] = value.to_dict() if isinstance(value, Reporter) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatusDoc:
        known = {f.name for f in fields(cls)} - {"extra", "reporter"}
        old = {"scheduler", "wrapper_host", "wrapper_pid"}
        kwargs: dict[str, Any] = {k: data[k] for k in known if k in data}
        kwargs["state"] = str(data.get("state") or "queued")
        extra = {k: v for k, v in data.items() if k not in known and k not in old and k != "reporter"}
        return cls(reporter=Reporter.from_record(data), extra=extra, **kwargs)


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


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
