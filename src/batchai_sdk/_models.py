"""Specs, states and small value types shared by the object model, the backends and the CLI.

Raw states (a job's status record, a scale set's provisioning state, ...) are mapped to ours in the
``from_raw`` functions here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ._toolkit import CNTK_LANGUAGES as CNTK_LANGUAGES  # re-exported: the toolkits live in _toolkit.py
from ._toolkit import TOOLKIT_SETTING_KEYS as TOOLKIT_SETTING_KEYS
from ._toolkit import TORCH_BACKENDS as TORCH_BACKENDS
from ._toolkit import Toolkit as Toolkit
from ._toolkit import validate_toolkit_settings as validate_toolkit_settings
from .exceptions import BatchAIJsonError, ValidationError
from .mounts import Mount, mount_to_dict, validate_mounts
from .node.policy.autoscale import AutoScaleError, AutoScaleSettings, parse_batchai_autoscale
from .node.policy.queue import PRIORITIES
from .node.protocol.records import PENDING_KINDS, PendingDoc, StatusDoc

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
OUTPUT_ID_RE = re.compile(r"[A-Za-z0-9_]{1,32}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SHIPPED_MODULE_RE = re.compile(r"batchai_sdk\.train\.[A-Za-z_][A-Za-z0-9_]*")
TRAINING_MODULE_HANG_TIMEOUT = 1800.0  # the watchdog's default for the shipped training modules (30 min)
DEFAULT_HANG_NOTICE = 600.0  # observe mode's default: 10 min of silence → stacks and a "possibly hung" status


def validate_name(value: object, field_name: str = "name") -> str:
    """Batch AI's resource-name rule: 1-64 letters, digits, ``-`` and ``_``, starting with a letter or digit
    (so that no name reads as a command-line option such as ``-rf``)."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(
            field_name,
            value,
            "1-64 characters, each a letter, a digit, '-' or '_', the first a letter or digit",
        )
    return value


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class JobState(str, enum.Enum):
    """A job's ``executionState``: queued, running, then succeeded, failed or terminated."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"

    @property
    def ended(self) -> bool:
        """True for succeeded, failed and terminated: the job will not change any more."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.TERMINATED)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def from_raw(cls, raw: str | None) -> JobState:
        """Map the wrapper's status record (or Batch AI's executionState spelling) to a JobState."""
        if raw is None:
            return cls.QUEUED
        key = raw.strip().lower()
        aliases = {"preparing": "running", "terminating": "running", "completed": "succeeded"}
        return cls(aliases.get(key, key))


class ClusterState(str, enum.Enum):
    """A cluster's ``allocationState``: resizing while nodes come or go, else steady."""

    RESIZING = "resizing"
    STEADY = "steady"

    def __str__(self) -> str:
        return self.value


class VmPriority(str, enum.Enum):
    """A cluster's VM priority: dedicated, or lowpriority (Spot VMs on Azure, which can be evicted)."""

    DEDICATED = "dedicated"
    LOWPRIORITY = "lowpriority"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class NodeCounts:
    """A cluster's nodes by state, as Batch AI's ``nodeStateCounts``."""

    idle: int = 0
    running: int = 0
    preparing: int = 0
    leaving: int = 0
    unusable: int = 0

    @property
    def total(self) -> int:
        """All the nodes counted, whatever their state."""
        return self.idle + self.running + self.preparing + self.leaving + self.unusable

    def to_batchai(self) -> dict[str, int]:
        """The ``nodeStateCounts`` object of ``az batchai cluster show``."""
        return {
            "idleNodeCount": self.idle,
            "leavingNodeCount": self.leaving,
            "preparingNodeCount": self.preparing,
            "runningNodeCount": self.running,
            "unusableNodeCount": self.unusable,
        }


class NodeState(str, enum.Enum):
    """A node's state: idle, running (a job), preparing (setup or job preparation), leaving, unusable."""

    IDLE = "idle"
    RUNNING = "running"
    PREPARING = "preparing"
    LEAVING = "leaving"
    UNUSABLE = "unusable"

    def __str__(self) -> str:
        return self.value


def count_nodes(states: Sequence[NodeState]) -> NodeCounts:
    return NodeCounts(
        idle=sum(s is NodeState.IDLE for s in states),
        running=sum(s is NodeState.RUNNING for s in states),
        preparing=sum(s is NodeState.PREPARING for s in states),
        leaving=sum(s is NodeState.LEAVING for s in states),
        unusable=sum(s is NodeState.UNUSABLE for s in states),
    )


@dataclass(frozen=True)
class FileInfo:
    """One entry of ``job.files()`` / ``share.list()``: the columns of ``az batchai job file list``."""

    name: str
    type: str  # "file" or "directory"
    size: int | None
    modified: datetime | None

    @property
    def is_dir(self) -> bool:
        """True for a directory, False for a file."""
        return self.type == "directory"

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready values (``modified`` in ISO 8601)."""
        return {
            "name": self.name,
            "type": self.type,
            "size": self.size,
            "modified": self.modified.isoformat() if self.modified else None,
        }


@dataclass(frozen=True)
class Node:
    """A machine of a cluster as the backend sees it."""

    id: str  # stable per cluster, used in log names: execution-<id>.log
    address: str  # what ssh/mpirun connect to ("localhost" for the local backend)
    machine: str  # nodes with the same machine key are one computer (job preparation runs once each)
    slots: int = 1
    private_address: str | None = None


@dataclass(frozen=True)
class ClusterSpec:
    """What a cluster is made of: name, VM size and priority, node count, image, node setup, price and
    autoscale settings."""

    name: str
    vm_size: str
    nodes: int
    vm_priority: VmPriority = VmPriority.DEDICATED
    image: str | None = None
    node_setup: str | None = None
    created: datetime = field(default_factory=utcnow)
    extra: Mapping[str, Any] = field(default_factory=dict)
    price_per_hour: float | None = None  # per node, set by the user (local/SSH: 0 when unset)
    autoscale: AutoScaleSettings | None = None
    health_check: str = "off"  # the gate nodes pass when they join: off, basic, full (docs/health.md)
    mounts: tuple[Mount, ...] = ()  # nodeSetup.mountVolumes: under AZ_BATCHAI_MOUNT_ROOT (mounts.py)
    # setupTask.secrets: the names are recorded; the values only reach the backend's secrets place
    node_setup_secret_names: tuple[str, ...] = ()
    node_setup_secrets: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    allow_fault_injection: bool = False  # fault drills (job.inject_fault) allowed on its jobs
    health_source: str | None = None  # the owner's health tool's folder on the head node (docs/health.md)

    def __post_init__(self) -> None:
        validate_name(self.name, "cluster name")
        if not isinstance(self.allow_fault_injection, bool):
            raise ValidationError("allow_fault_injection", self.allow_fault_injection, "True or False")
        object.__setattr__(self, "mounts", validate_mounts(self.mounts))
        secrets = validate_secrets(self.node_setup_secrets, "node_setup_secrets")
        if not isinstance(self.node_setup_secret_names, list | tuple):
            raise ValidationError("node_setup_secret_names", self.node_setup_secret_names, "a list of names")
        object.__setattr__(self, "node_setup_secrets", secrets)
        names = tuple(sorted(set(self.node_setup_secret_names) | set(secrets)))
        for name in names:
            if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
                raise ValidationError("node_setup_secret_names", name, "variable names")
        object.__setattr__(self, "node_setup_secret_names", names)
        if not isinstance(self.vm_size, str) or not self.vm_size.strip():
            raise ValidationError("vm_size", self.vm_size, "a VM size such as 'Standard_NC4as_T4_v3'")
        validate_node_target(self.nodes, "nodes")
        object.__setattr__(self, "vm_priority", _priority(self.vm_priority))
        object.__setattr__(self, "price_per_hour", validate_price(self.price_per_hour))
        validate_health_level(self.health_check)
        if self.health_source is not None:
            validate_health_source(self.health_source)

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready values (the cluster's record on the share)."""
        return {
            "name": self.name,
            "vm_size": self.vm_size,
            "nodes": self.nodes,
            "vm_priority": self.vm_priority.value,
            "image": self.image,
            "node_setup": self.node_setup,
            "created": self.created.isoformat(),
            "extra": dict(self.extra),
            "price_per_hour": self.price_per_hour,
            "autoscale": self.autoscale.to_dict() if self.autoscale else None,
            "health_check": self.health_check,
            "mounts": [mount_to_dict(m) for m in self.mounts],
            "node_setup_secret_names": list(self.node_setup_secret_names),  # never a value
            **({"allow_fault_injection": True} if self.allow_fault_injection else {}),
            **({"health_source": self.health_source} if self.health_source else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """The spec from ``to_dict``'s values; validates them as the constructor does."""
        return cls(
            name=data["name"],
            vm_size=data["vm_size"],
            nodes=int(data["nodes"]),
            vm_priority=VmPriority(data.get("vm_priority", "dedicated")),
            image=data.get("image"),
            node_setup=data.get("node_setup"),
            created=parse_time(data.get("created")) or utcnow(),
            extra=data.get("extra") or {},
            price_per_hour=data.get("price_per_hour"),
            autoscale=autoscale_from_dict(data.get("autoscale")),
            health_check=data.get("health_check") or "off",
            mounts=data.get("mounts") or (),
            node_setup_secret_names=data.get("node_setup_secret_names") or (),
            allow_fault_injection=bool(data.get("allow_fault_injection", False)),
            health_source=data.get("health_source"),
        )


def validate_secrets(value: object, field_name: str) -> dict[str, str]:
    """Secret environment variables (name → value); an error names the variable, never shows a value."""
    if not isinstance(value, Mapping):
        raise ValidationError(field_name, type(value).__name__, "a mapping of variable names to values")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            raise ValidationError(field_name, key, "variable names of letters, digits and '_'")
        if not isinstance(item, str) or "\0" in item:
            raise ValidationError(f"{field_name}.{key}", "***", "a string without NUL")
        out[key] = item
    return out


HEALTH_LEVELS = ("off", "basic", "full")


def validate_health_level(value: object, field_name: str = "health_check") -> str:
    """A health gate level: ``off``, ``basic`` (seconds: GPUs, ECC, throttling, versions, a rendezvous) or
    ``full`` (about a minute: DCGM diagnostics, all-reduce bandwidth per node and between nodes)."""
    if value not in HEALTH_LEVELS:
        raise ValidationError(field_name, value, "one of 'off', 'basic', 'full'")
    return str(value)


def validate_health_source(value: object, field_name: str = "health_source") -> str:
    """The folder a health tool of the cluster's owner (an NHC cron job) leaves its reports in, on the head
    node: an absolute, normalized path without whitespace (docs/health.md says who may write there)."""
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or value == "/"
        or posixpath.normpath(value) != value
        or len(value) > 1024
        or any(c.isspace() or not c.isprintable() for c in value)
    ):
        raise ValidationError(field_name, value, "an absolute folder path on the head node (no whitespace)")
    return value


def validate_price(value: object, field_name: str = "price_per_hour") -> float | None:
    """A price per node-hour: a finite number >= 0, or None (unknown)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValidationError(field_name, value, "a price per node-hour >= 0, or None")
    return float(value)


def autoscale_settings(
    min_nodes: object,
    max_nodes: object,
    initial_nodes: object = None,
    idle_seconds_before_scaledown: object = 600.0,
) -> AutoScaleSettings:
    """Validated autoscale settings; a bad value raises ValidationError naming the argument."""
    try:
        return AutoScaleSettings(
            min_nodes,  # type: ignore[arg-type]  # validated by AutoScaleSettings
            max_nodes,  # type: ignore[arg-type]
            initial_nodes,  # type: ignore[arg-type]
            idle_seconds_before_scaledown,  # type: ignore[arg-type]
        )
    except AutoScaleError as exc:
        raise ValidationError(exc.field, exc.value, exc.expected) from None


def autoscale_from_dict(data: Mapping[str, Any] | None) -> AutoScaleSettings | None:
    if not data:
        return None
    try:
        return AutoScaleSettings.from_dict(data)
    except AutoScaleError as exc:
        raise ValidationError(f"autoscale.{exc.field}", exc.value, exc.expected) from None


def autoscale_from_batchai(
    data: Mapping[str, Any] | None, *, idle_seconds_before_scaledown: float | None = 600.0
) -> AutoScaleSettings | None:
    """Batch AI's autoScaleSettings (the object, or a cluster body holding it) or None; a bad value
    raises BatchAIJsonError naming the JSON field (``autoScaleSettings.maximumNodeCount``)."""
    try:
        return parse_batchai_autoscale(data, idle_seconds_before_scaledown=idle_seconds_before_scaledown)
    except AutoScaleError as exc:
        raise BatchAIJsonError(exc.field, exc.value, exc.expected) from None


def validate_node_target(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(field_name, value, "an integer >= 0")
    return value


def _priority(value: object) -> VmPriority:
    try:
        return VmPriority(str(value).lower())
    except ValueError:
        raise ValidationError("vm_priority", value, "'dedicated' or 'lowpriority'") from None


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    created: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "created": self.created.isoformat()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentSpec:
        return cls(name=data["name"], created=parse_time(data.get("created")) or utcnow())


def default_hang_timeout(python_script: str | None) -> float | None:
    """The watchdog's default: ``TRAINING_MODULE_HANG_TIMEOUT`` for a shipped ``batchai_sdk.train`` module,
    None (off) for everything else."""
    if python_script is not None and SHIPPED_MODULE_RE.fullmatch(python_script):
        return TRAINING_MODULE_HANG_TIMEOUT
    return None


@dataclass(frozen=True)
class JobSpec:
    """Everything a job needs, independent of the backend. The Batch AI job.json maps onto this."""

    name: str
    experiment: str
    cluster: str
    node_count: int = 1
    toolkit: Toolkit = Toolkit.HOROVOD
    python_script: str | None = (
        None  # horovod: a local file, a share path ($AZ_BATCHAI_... allowed), or a module
    )
    args: tuple[str, ...] = ()
    command_line: str | None = None  # custommpi / custom: run through the shell on the node
    process_count: int | None = None
    python_interpreter: str | None = None
    job_preparation: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    secret_environment: tuple[str, ...] = ()  # names in `environment` never written to records or logs
    std_out_err_path_prefix: str | None = None
    mount_path: str | None = None  # relativeMountPath of the workspace share under AZ_BATCHAI_JOB_MOUNT_ROOT
    mounts: tuple[Mount, ...] = ()  # the job's other mounts, under AZ_BATCHAI_JOB_MOUNT_ROOT (mounts.py)
    input_directories: Mapping[str, str] = field(default_factory=dict)
    output_directories: Mapping[str, str] = field(default_factory=dict)
    container_image: str | None = None
    max_wall_clock_seconds: float | None = None
    # Jobs that survive (see docs/survive.md). hang_timeout: seconds without output from any rank before the
    # watchdog collects stacks and fails the job; None = the default (off for user scripts,
    # TRAINING_MODULE_HANG_TIMEOUT for the shipped batchai_sdk.train modules), 0 = off.
    hang_timeout: float | None = None
    # observe mode: seconds without output from any rank before the stacks are collected and the status says
    # "possibly hung" (the job goes on); once the job reports steps, no new step for max(3 x the median step
    # interval, min(60 s, this)) instead (docs/survive.md); None = DEFAULT_HANG_NOTICE, 0 = off
    hang_notice: float | None = None
    max_retries: int = 0  # requeues after a lost node or a listed exit code (evictions do not count)
    max_cost: float | None = None  # end the job once its cost estimate passes this (the cluster's currency)
    source_dir: str | None = None  # a local folder uploaded whole; python_script is a path inside it
    retry_on_exit_codes: tuple[int, ...] = ()
    health_check: str | None = None  # a gate its nodes pass right before it starts (off, basic, full)
    # the toolkit's own settings, snake_case (see TOOLKIT_SETTING_KEYS and docs/toolkits.md)
    toolkit_settings: Mapping[str, Any] = field(default_factory=dict)
    scheduling_priority: str = "normal"  # low, normal, high: the cluster's queue order (node/policy/queue.py)
    # source_dir's requirements.txt / pyproject.toml dependencies installed into the job's own venv on each
    # node (_requirements.py); False: they are there already
    install_requirements: bool = True

    def __post_init__(self) -> None:
        validate_name(self.name, "job name")
        validate_name(self.experiment, "experiment name")
        validate_name(self.cluster, "cluster name")
        if isinstance(self.node_count, bool) or not isinstance(self.node_count, int) or self.node_count < 1:
            raise ValidationError("node_count", self.node_count, "an integer >= 1")
        if self.process_count is not None and (
            isinstance(self.process_count, bool)
            or not isinstance(self.process_count, int)
            or self.process_count < 1
        ):
            raise ValidationError("process_count", self.process_count, "an integer >= 1 or None")
        object.__setattr__(self, "toolkit", Toolkit.parse(self.toolkit))
        if self.health_check is not None:
            validate_health_level(self.health_check)
        if isinstance(self.args, str):
            raise ValidationError("args", self.args, "a list of strings, one per argument")
        object.__setattr__(self, "args", tuple(self.args))
        for i, arg in enumerate(self.args):
            if not isinstance(arg, str):
                raise ValidationError(f"args[{i}]", arg, "a string")
        object.__setattr__(
            self, "toolkit_settings", validate_toolkit_settings(self.toolkit, self.toolkit_settings)
        )
        if not isinstance(self.install_requirements, bool):
            raise ValidationError("install_requirements", self.install_requirements, "True or False")
        if self.scheduling_priority not in PRIORITIES:
            raise ValidationError("scheduling_priority", self.scheduling_priority, "low, normal or high")
        self._check_toolkit()
        for key, value in self.environment.items():
            if not ENV_NAME_RE.fullmatch(str(key)):
                raise ValidationError("environment", key, "variable names of letters, digits and '_'")
            if not isinstance(value, str):
                shown = "***" if key in self.secret_environment else value  # a secret is never echoed
                raise ValidationError(f"environment.{key}", shown, "a string")
        for kind, dirs in (
            ("input_directories", self.input_directories),
            ("output_directories", self.output_directories),
        ):
            for key in dirs:
                if not OUTPUT_ID_RE.fullmatch(str(key)):
                    raise ValidationError(kind, key, "ids of 1-32 letters, digits and '_'")
        wall = self.max_wall_clock_seconds
        if wall is not None and (
            isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < float("inf")
        ):
            raise ValidationError("max_wall_clock_seconds", wall, "a finite number of seconds > 0")
        if self.max_cost is not None and (
            isinstance(self.max_cost, bool)
            or not isinstance(self.max_cost, int | float)
            or not 0 < self.max_cost < float("inf")
        ):
            raise ValidationError("max_cost", self.max_cost, "a finite amount > 0")
        if self.mount_path is not None and (
            not self.mount_path.strip("/")
            or ".." in self.mount_path.split("/")
            or self.mount_path.startswith("/")
        ):
            raise ValidationError(
                "mount_path", self.mount_path, "a folder name under the job's mount root, without '..'"
            )
        object.__setattr__(self, "mounts", validate_mounts(self.mounts))
        if self.mount_path and any(m.relative_mount_path == self.mount_path.strip("/") for m in self.mounts):
            raise ValidationError("mounts", self.mount_path, "a relative_mount_path other than mount_path")
        self._check_survival()

    def _check_survival(self) -> None:
        """Validate hang_timeout, max_retries, retry_on_exit_codes; fill in hang_timeout's default."""
        timeout = self.hang_timeout
        if timeout is not None:
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, (int, float))
                or not 0 <= timeout < math.inf
            ):
                raise ValidationError(
                    "hang_timeout", timeout, "a number of seconds > 0, 0 to turn the watchdog off, or None"
                )
            object.__setattr__(self, "hang_timeout", float(timeout))
        else:
            object.__setattr__(self, "hang_timeout", default_hang_timeout(self.python_script))
        notice = DEFAULT_HANG_NOTICE if self.hang_notice is None else self.hang_notice
        if isinstance(notice, bool) or not isinstance(notice, (int, float)) or not 0 <= notice < math.inf:
            raise ValidationError(
                "hang_notice", notice, "a number of seconds > 0, 0 to turn observe mode off, or None"
            )
        object.__setattr__(self, "hang_notice", float(notice))
        retries = self.max_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValidationError("max_retries", retries, "an integer >= 0")
        codes = self.retry_on_exit_codes
        if isinstance(codes, (str, bytes)) or not isinstance(codes, Iterable):
            raise ValidationError("retry_on_exit_codes", codes, "a list of exit codes 1..255")
        object.__setattr__(self, "retry_on_exit_codes", tuple(codes))
        for i, code in enumerate(self.retry_on_exit_codes):
            if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
                raise ValidationError(f"retry_on_exit_codes[{i}]", code, "an exit code 1..255")

    @property
    def watchdog_seconds(self) -> float | None:
        """The hang watchdog's timeout, or None when it is off (``hang_timeout`` None or 0)."""
        return self.hang_timeout or None

    @property
    def notice_seconds(self) -> float | None:
        """Observe mode's silence before a "possibly hung" status, or None when it is off."""
        return self.hang_notice or None

    def _check_toolkit(self) -> None:
        """What each toolkit needs: a script (or, for cntk BrainScript and caffe, a config file), or a
        command line; and nothing its job.json settings cannot hold."""
        kit, settings = self.toolkit, self.toolkit_settings
        if kit.runs_command_line:
            if not self.command_line:
                raise ValidationError("command_line", self.command_line, f"a command line for a {kit} job")
            return
        config = settings.get("config_file")
        if kit is Toolkit.CNTK and settings.get("language_type") == "BrainScript":
            if not config:
                raise ValidationError(
                    "toolkit_settings.config_file", config, "the BrainScript config file of a cntk job"
                )
            if self.python_script:
                raise ValidationError(
                    "python_script", self.python_script, "None for a cntk job in BrainScript"
                )
        elif kit is Toolkit.CAFFE and config:
            if self.python_script:
                raise ValidationError(
                    "python_script", self.python_script, "None when a caffe job has a config_file"
                )
        elif not self.python_script:
            raise ValidationError("python_script", self.python_script, f"a script path for a {kit} job")
        elif config is not None:
            raise ValidationError(
                "toolkit_settings.config_file", config, f"unset for a {kit} job with a python_script"
            )
        if kit is Toolkit.TENSORFLOW:
            if self.args:
                raise ValidationError(
                    "args",
                    list(self.args),
                    "empty for a tensorflow job: use toolkit_settings master_args, "
                    "worker_args and parameter_server_args",
                )
            if self.process_count is not None:
                raise ValidationError(
                    "process_count",
                    self.process_count,
                    "None for a tensorflow job: use toolkit_settings worker_count and parameter_server_count",
                )
        if kit is Toolkit.CAFFE2 and self.process_count is not None:
            raise ValidationError("process_count", self.process_count, "None for a caffe2 job (one per node)")

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{k}={v!r}" for k, v in self.to_dict(redact=True).items() if v not in (None, (), [], {})
        )
        return f"JobSpec({shown})"

    @property
    def total_processes(self) -> int:
        """Processes the job starts on nodes without GPUs (pytorch starts one per GPU where there are)."""
        from .node.policy.toolkits import process_count

        return process_count(self.toolkit.value, self.launch_settings(), self.node_count, 0)

    def launch_settings(self) -> dict[str, Any]:
        """``toolkit_settings`` plus ``process_count`` when set: what the nodes' toolkit functions read."""
        out = dict(self.toolkit_settings)
        if self.process_count is not None:
            out["process_count"] = self.process_count
        return out

    def to_dict(self, *, redact: bool = True) -> dict[str, Any]:
        """A JSON-ready dict; values of secret variables are replaced unless ``redact=False``."""
        data = dataclasses.asdict(self)
        data["toolkit"] = self.toolkit.value
        data["args"] = list(self.args)
        data["secret_environment"] = list(self.secret_environment)
        data["environment"] = {
            k: ("***" if redact and k in self.secret_environment else v) for k, v in self.environment.items()
        }
        data["input_directories"] = dict(self.input_directories)
        data["output_directories"] = dict(self.output_directories)
        data["retry_on_exit_codes"] = list(self.retry_on_exit_codes)
        data["toolkit_settings"] = dict(self.toolkit_settings)
        data["mounts"] = [mount_to_dict(m) for m in self.mounts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobSpec:
        """The spec from ``to_dict``'s values; fields it does not know are dropped."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["args"] = tuple(kwargs.get("args") or ())
        kwargs["secret_environment"] = tuple(kwargs.get("secret_environment") or ())
        kwargs["retry_on_exit_codes"] = tuple(kwargs.get("retry_on_exit_codes") or ())
        return cls(**kwargs)

    def replace(self, **changes: Any) -> JobSpec:
        """A copy of the spec with ``changes`` (field names as keywords) applied and validated."""
        return dataclasses.replace(self, **changes)


def heartbeat_timeout() -> float:
    """Seconds without a heartbeat after which a job that has not ended is taken for lost (its wrapper
    was killed or its node went down). ``BATCHAI_HEARTBEAT_TIMEOUT`` overrides the default of 180."""
    try:
        return max(1.0, float(os.environ.get("BATCHAI_HEARTBEAT_TIMEOUT", "180")))
    except ValueError:
        raise ValidationError(
            "BATCHAI_HEARTBEAT_TIMEOUT", os.environ.get("BATCHAI_HEARTBEAT_TIMEOUT"), "a number of seconds"
        ) from None


@dataclass(frozen=True)
class PendingReason:
    """Why a queued job waits and until when (``JobStatus.pending``; docs/pending.md).

    ``kind`` is one of ``PENDING_KINDS``: ``waiting_for_nodes`` (busy; ``position`` in the queue, 1 is next,
    and the jobs ``ahead``), ``priority``, ``reserved`` (free nodes kept for the job ahead),
    ``nodes_unhealthy`` / ``nodes_down`` (``nodes`` names each node and why), ``preparing_nodes``,
    ``scaling_up``, ``cluster_at_zero``, ``quota``, ``mount_unavailable``, ``held``, ``dependency``,
    ``submitted``, ``other``. ``estimated_start`` comes from the running jobs' wall clock limits (None
    where a job it waits for has none); ``source`` is the backend's own word (Slurm's Reason).
    """

    kind: str
    message: str
    position: int | None = None
    ahead: tuple[str, ...] = ()
    ahead_count: int = 0
    nodes: Mapping[str, str] = field(default_factory=dict, hash=False)  # hashable, as JobStatus is
    estimated_start: datetime | None = None
    source: str | None = None

    KINDS = PENDING_KINDS

    @classmethod
    def from_doc(cls, doc: PendingDoc | None) -> PendingReason | None:
        """The reason from its record on the share (``node.protocol.PendingDoc``); None for none."""
        if doc is None:
            return None
        try:
            start = parse_time(doc.estimated_start)
        except (TypeError, ValueError):
            start = None
        return cls(
            kind=doc.kind,
            message=doc.message,
            position=doc.position,
            ahead=tuple(doc.ahead),
            ahead_count=doc.ahead_count,
            nodes=dict(doc.nodes),
            estimated_start=start,
            source=doc.source,
        )

    def line(self, now: datetime | None = None) -> str:
        """One line: ``waiting_for_nodes (#2 in the queue): needs 1 node(s) ...; estimated start ...``."""
        where = f" (#{self.position} in the queue)" if self.position else ""
        text = f"{self.kind}{where}: {self.message}"
        if self.estimated_start is not None:
            left = (self.estimated_start - (now or utcnow())).total_seconds()
            when = self.estimated_start.strftime("%H:%M:%S UTC")
            text += f"; estimated start {when}" + (f" (in ~{_span(left)})" if left > 0 else " (any moment)")
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``job show`` prints it."""
        return {
            "kind": self.kind,
            "message": self.message,
            "position": self.position,
            "ahead": list(self.ahead),
            "aheadCount": self.ahead_count,
            "nodes": dict(self.nodes),
            "estimatedStart": self.estimated_start.isoformat() if self.estimated_start else None,
            "source": self.source,
        }


def _span(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass(frozen=True)
class JobStatus:
    """A job's status record on the share (``status.json``, ``node.protocol.StatusDoc``), as read.

    ``lost`` marks a job whose reporter (its scheduler, or the Slurm step) stopped writing its heartbeat:
    it is reported as ``failed`` (``Job.status`` first asks the scheduler whether it still runs it).
    """

    state: JobState
    exit_code: int | None = None
    creation_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    failure_reason: str | None = None
    nodes: tuple[str, ...] = ()
    preparing: bool = False
    reporter_pid: int | None = None
    heartbeat: datetime | None = None
    reporter_host: str | None = None
    lost: bool = False
    # observe mode: "possibly hung — stuck at step 5: rank 1 on vm_1 is in train.py:67 (...); rank 0 waits in
    # all_reduce at train.py:71 — no new step for 1 min 2 s; stacks in ..." (or, without stacks to read,
    # "no output for 10 min, possibly hung: stacks in ...")
    notice: str | None = None
    pending: PendingReason | None = None  # a queued job: why it waits and until when

    @property
    def wrapper_pid(self) -> int | None:
        """Deprecated: ``reporter_pid`` (round 1's job wrapper is gone)."""
        return self.reporter_pid

    @property
    def wrapper_host(self) -> str | None:
        """Deprecated: ``reporter_host``."""
        return self.reporter_host

    @classmethod
    def from_record(
        cls, data: Mapping[str, Any] | None, *, timeout: float | None = None, now: datetime | None = None
    ) -> JobStatus:
        """The record's status; a job that stopped reporting (see ``heartbeat_timeout``) reads as failed."""
        if not data:
            return cls(state=JobState.QUEUED)
        doc = StatusDoc.from_dict(dict(data))
        status = cls(
            state=JobState.from_raw(data.get("state")),
            exit_code=doc.exit_code,
            creation_time=parse_time(doc.creation_time),
            start_time=parse_time(doc.start_time),
            end_time=parse_time(doc.end_time),
            failure_reason=doc.failure_reason,
            nodes=tuple(doc.nodes or ()),
            preparing=bool(doc.preparing),
            reporter_pid=doc.reporter.pid if doc.reporter else None,
            heartbeat=parse_time(doc.heartbeat),
            reporter_host=doc.reporter.host if doc.reporter else None,
            notice=doc.notice,
            pending=PendingReason.from_doc(doc.pending) if doc.state == "queued" else None,
        )
        if status.state.ended or timeout is None:
            return status
        last = status.heartbeat or status.creation_time
        if last is None or ((now or utcnow()) - last).total_seconds() <= timeout:
            return status
        where = f" on {status.reporter_host}" if status.reporter_host else ""
        who = f" (pid {status.reporter_pid})" if status.reporter_pid else ""
        why = (
            f"the job's scheduler{where}{who} stopped reporting at {last.isoformat()} (it was killed, or"
            " its head node went down)"
            if status.heartbeat
            else f"the job never started: no scheduler reported on it (submitted at {last.isoformat()})"
        )
        return dataclasses.replace(status, state=JobState.FAILED, failure_reason=why, lost=True, pending=None)
