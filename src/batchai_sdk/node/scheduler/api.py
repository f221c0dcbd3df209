"""The scheduler's socket is an API: the schema every request is checked against before anything is
written, and the one place that turns bytes into a request.

A request is one JSON object on one line, at most ``MAX_REQUEST`` bytes and ``MAX_DEPTH`` levels deep,
with finite numbers only (``NaN``/``Infinity`` are refused), known operations and typed, bounded fields;
the cluster's configuration it may carry is checked the same way (a node's address becomes an ``ssh``
argument, so it must look like a host). Anything else raises ``RequestError`` naming the field, and the
scheduler answers it without a change to its database, its files or its loop. Fields this version does
not know are ignored (a newer client may send more). ``check_row`` is the same idea for the scheduler's
own rows: one a bug or an older version wrote with a bad value is quarantined instead of wedging every
restart.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ..protocol.names import LEVELS, OPS, PRIORITIES
from ..protocol.names import NAME as NAME  # not their users' modules: ctl imports this one

if TYPE_CHECKING:  # types only: ctl loads this module with every request, and its records are JSON
    from ..protocol.cluster import ClusterConfig, HealthConfig, NodeConfig
    from ..protocol.requests import JobRef, SubmitRequest

MAX_REQUEST = 1 << 20  # bytes of one request line: secrets and a cluster of thousands of nodes fit
MAX_DEPTH = 8
MAX_ITEMS = 10_000  # entries of one list or object
MAX_TEXT = 65_536  # characters of one string
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# a host name or address, never an ssh option ("-o..."); empty while an Azure node has none yet
HOST = re.compile(r"^([A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]{0,252})?$")
PRINTABLE = re.compile(r"^[^\x00-\x1f]{0,255}$")  # a label: a machine key, a creation time
NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
WEEKS_52 = 52 * 7 * 24 * 3600.0


class RequestError(Exception):
    """A request the scheduler refuses; ``code`` tells the client which typed error to raise."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def invalid(field: str, value: Any, expected: str) -> RequestError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:80] + "..."
    return RequestError("invalid", f"{field}: {shown} is not {expected}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def parse(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data`` (one line), within the size, depth and number limits; RequestError
    otherwise. Its fields are checked by ``check_request``."""
    if len(data) > MAX_REQUEST:
        raise RequestError("invalid", f"the request is larger than {MAX_REQUEST} bytes")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise RequestError("invalid", f"the request is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise RequestError("invalid", f"the request is not one JSON object: {exc}") from None
    _check_shape(doc)
    if not isinstance(doc, dict):
        raise RequestError("invalid", f"a request is a JSON object, not {type(doc).__name__}")
    return doc


def _check_shape(doc: Any) -> None:
    """Depth and sizes, without recursion (the document may be hostile)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise RequestError("invalid", f"the request is nested deeper than {MAX_DEPTH} levels")
            if len(value) > MAX_ITEMS:
                raise RequestError("invalid", f"a list or object of the request has over {MAX_ITEMS} entries")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str) and len(key) > MAX_TEXT:
                    raise RequestError("invalid", f"a key is longer than {MAX_TEXT} characters")
                stack.append((item, depth + 1))
        elif isinstance(value, str) and len(value) > MAX_TEXT:
            raise RequestError("invalid", f"a string of the request is longer than {MAX_TEXT} characters")


# -- fields -----------------------------------------------------------------------------------------------
def text(
    doc: Mapping[str, Any], field: str, pattern: re.Pattern[str] | None = None, *, optional: bool = False
) -> str | None:
    value = doc.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)) or "\0" in value:
        raise invalid(field, value, "a valid name" if pattern is not None else "a string")
    return value


def integer(doc: Mapping[str, Any], field: str, low: int, high: int, *, optional: bool = False) -> int | None:
    value = doc.get(field)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(field, value, f"an integer from {low} to {high}")
    return value


def number(
    doc: Mapping[str, Any], field: str, low: float, high: float, *, above: bool = False, optional: bool = True
) -> float | None:
    """A finite number in [low, high] (``above``: greater than ``low``), or None when optional."""
    value = doc.get(field)
    if value is None and optional:
        return None
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > low if above else value >= low)
        and value <= high
    ):
        return float(value)
    bound = f"> {low:g}" if above else f">= {low:g}"
    raise invalid(field, value, f"a finite number {bound} and <= {high:g}")


def string_map(doc: Mapping[str, Any], field: str, key_pattern: re.Pattern[str]) -> dict[str, str]:
    value = doc.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and key_pattern.match(k) and isinstance(v, str) and "\0" not in v
        for k, v in value.items()
    ):
        raise invalid(field, value, "an object of variable names to strings")
    return dict(value)


# -- requests ---------------------------------------------------------------------------------------------
def check_request(doc: dict[str, Any]) -> dict[str, Any]:
    """The request with its fields checked (and normalised: numbers as float, absent lists empty)."""
    op = doc.get("op")
    if op not in OPS:
        raise invalid("op", op, f"one of {', '.join(OPS)}")
    out: dict[str, Any] = {"op": op}
    if doc.get("cluster") is not None:
        out["cluster"] = check_cluster(doc["cluster"])
    if doc.get("no_start") is not None:
        if not isinstance(doc["no_start"], bool):
            raise invalid("no_start", doc["no_start"], "true or false")
        out["no_start"] = doc["no_start"]
    if op == "health":  # checked and bounded by health_reports.normalize
        out["report"] = doc.get("report")
    if op in ("terminate", "job"):
        out.update(check_job_ref(doc))
    if op == "submit":
        out.update(check_submit(doc))
    return out


def check_job_ref(doc: Mapping[str, Any]) -> JobRef:
    """The job a control call names."""
    ref: JobRef = {"experiment": _name(doc, "experiment"), "name": _name(doc, "name")}
    return ref


def check_submit(doc: Mapping[str, Any]) -> SubmitRequest:
    """A submit's fields, checked and normalised (numbers as float, absent lists empty)."""
    codes = doc.get("retry_on_exit_codes") or []
    if not isinstance(codes, list) or not all(
        not isinstance(c, bool) and isinstance(c, int) and 1 <= c <= 255 for c in codes
    ):
        raise invalid("retry_on_exit_codes", codes, "a list of exit codes 1..255")
    priority = doc.get("scheduling_priority")
    if priority is not None and (not isinstance(priority, str) or priority.lower() not in PRIORITIES):
        raise invalid("scheduling_priority", priority, f"one of {', '.join(PRIORITIES)}")
    request: SubmitRequest = {
        "op": "submit",
        "experiment": _name(doc, "experiment"),
        "name": _name(doc, "name"),
        "request_id": text(doc, "request_id", REQUEST_ID, optional=True),
        "node_count": integer(doc, "node_count", 1, MAX_ITEMS) or 1,
        "max_wall_clock_seconds": number(doc, "max_wall_clock_seconds", 0, 100 * WEEKS_52, above=True),
        "created": text(doc, "created", PRINTABLE, optional=True),
        "hang_timeout": number(doc, "hang_timeout", 0, 100 * WEEKS_52),
        "max_retries": integer(doc, "max_retries", 0, 1000, optional=True) or 0,
        "retry_on_exit_codes": sorted(set(codes)),
        "max_cost": number(doc, "max_cost", 0, 1e12, above=True),
        "price": number(doc, "price", 0, 1e9),
        "secrets": string_map(doc, "secrets", ENV_NAME),
        "hang_notice": number(doc, "hang_notice", 0, 100 * WEEKS_52),
        "scheduling_priority": priority,
    }
    return request


def _name(doc: Mapping[str, Any], field: str) -> str:
    return text(doc, field, NAME) or ""  # text raises for a missing one: never ""


def request_digest(request: Mapping[str, Any]) -> str:
    """What a checked submit asks for, as a digest its ``request_id`` is bound to: every field but the
    id, the cluster (the client's view, sent with every call) and the secrets' values (their names count;
    a digest of a secret is not stored)."""
    content = {k: v for k, v in request.items() if k not in ("op", "request_id", "cluster", "no_start")}
    content["secrets"] = sorted(request.get("secrets") or {})
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def _nodes(value: Any, field: str) -> list[NodeConfig]:
    if not isinstance(value, list):
        raise invalid(field, value, "a list of nodes")
    out = []
    for i, node in enumerate(value):
        if not isinstance(node, dict):
            raise invalid(f"{field}[{i}]", node, "a node object")
        checked = {
            **node,
            "id": text(node, "id", NODE_ID),
            "address": text(node, "address", HOST),
            "machine": text(node, "machine", PRINTABLE),
            "slots": integer(node, "slots", 1, 4096),
        }
        out.append(cast("NodeConfig", checked))  # each field checked above
    return out


def check_cluster(cfg: Any) -> ClusterConfig:
    """The cluster configuration a request carries (and ``cluster.json`` holds), checked."""
    if not isinstance(cfg, dict):
        raise invalid("cluster", cfg, "the cluster's configuration object")
    out = dict(cfg)
    out["cluster"] = text(cfg, "cluster", NAME)
    out["nodes"] = _nodes(cfg.get("nodes"), "cluster.nodes")
    if cfg.get("pool") is not None:
        out["pool"] = _nodes(cfg["pool"], "cluster.pool")
    for field in ("python", "node_main", "meta_root", "cluster_dir"):
        value = cfg.get(field)
        absolute = field == "python" or (isinstance(value, str) and value.startswith("/"))
        if not isinstance(value, str) or not value or "\0" in value or not absolute:
            raise invalid(f"cluster.{field}", value, "a program" if field == "python" else "an absolute path")
    command = cfg.get("ssh_command")
    words_ok = isinstance(command, list) and all(isinstance(w, str) and "\0" not in w for w in command)
    if command is not None and not (command and words_ok):
        raise invalid("cluster.ssh_command", command, "a command (a list of strings) or null")
    out["env"] = string_map(cfg, "env", ENV_NAME)
    if cfg.get("autoscale") is not None:
        if not isinstance(cfg["autoscale"], dict):
            raise invalid("cluster.autoscale", cfg["autoscale"], "the autoscale settings or null")
        from ..policy.autoscale import AutoScaleSettings  # only where a cluster scales: it loads dataclasses

        try:
            AutoScaleSettings.from_dict(cfg["autoscale"])
        except (ValueError, TypeError) as exc:
            raise invalid("cluster.autoscale", cfg["autoscale"], f"valid settings ({exc})") from None
    azure = cfg.get("azure")
    scale_set = ("subscription", "resource_group", "vmss")
    if azure is not None and not (
        isinstance(azure, dict) and all(isinstance(azure.get(k), str) for k in scale_set)
    ):
        raise invalid("cluster.azure", azure, "the scale set (subscription, resource_group, vmss) or null")
    if cfg.get("head") is not None:  # the node the client started this scheduler on (head.py)
        out["head"] = text(cfg, "head", NODE_ID)
    if cfg.get("down") is not None:  # nodes the client found silent as it revived the scheduler
        down = cfg["down"]
        if not isinstance(down, list) or not all(isinstance(n, str) and NODE_ID.match(n) for n in down):
            raise invalid("cluster.down", down, "a list of node ids")
        out["down"] = list(down)
    if cfg.get("idle_exit_seconds") is not None:
        out["idle_exit_seconds"] = number(cfg, "idle_exit_seconds", 0, WEEKS_52)
    if cfg.get("health") is not None:
        out["health"] = check_health(cfg["health"])
    return cast("ClusterConfig", out)  # each field checked above


def check_health(health: Any) -> HealthConfig:
    """The health gate's settings (``HeadNodeScheduler.health_settings``)."""
    if not isinstance(health, dict):
        raise invalid("cluster.health", health, "the health gate's settings or null")
    if health.get("level") not in LEVELS:
        raise invalid("cluster.health.level", health.get("level"), f"one of {', '.join(LEVELS)}")
    out = {
        "level": health["level"],
        "gpus": integer(health, "gpus", 0, 64, optional=True) or 0,
        "node_busbw": number(health, "node_busbw", 0, 1e6),
        "link_busbw": number(health, "link_busbw", 0, 1e6),
        "tolerance": number(health, "tolerance", 0, 1),
        "source": health.get("source"),
    }
    source = out["source"]
    if source is not None and not (isinstance(source, str) and source.startswith("/") and "\0" not in source):
        raise invalid("cluster.health.source", source, "an absolute folder path")
    return cast("HealthConfig", {k: v for k, v in out.items() if v is not None})


# -- the scheduler's own rows -------------------------------------------------------------------------------
STATES = ("queued", "running", "cleaning", "succeeded", "failed", "terminated")
NUMBERS = ("wall", "started", "stop_sent", "hang", "max_cost", "price")
JSON_LISTS = ("nodes", "retry_codes", "attempts")


def check_row(row: Mapping[str, Any]) -> str | None:
    """Why a row of the jobs table cannot be worked with (a value no code path expects), or None."""
    try:
        if row["state"] not in STATES:
            return f"state {row['state']!r} is not one of {', '.join(STATES)}"
        for field in ("experiment", "name"):
            if not isinstance(row[field], str) or not NAME.match(row[field]):
                return f"{field} {row[field]!r} is not a valid name"
        count = row["node_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return f"node_count {row['node_count']!r} is not an integer >= 1"
        for field in ("attempt", "max_retries", "launcher_pid", "exit_code"):
            if row[field] is not None and not isinstance(row[field], int):
                return f"{field} {row[field]!r} is not an integer"
        for field in NUMBERS:
            value = row[field]
            if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
                return f"{field} {value!r} is not a finite number"
        for field in JSON_LISTS:
            if not isinstance(json.loads(row[field]), list):
                return f"{field} {row[field]!r} is not a JSON list"
        if row["state"] == "cleaning":
            cause, _detail = json.loads(row["reason"])
            if not isinstance(cause, str):
                return f"reason {row['reason']!r} is not an attempt's end"
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        return f"unreadable: {exc!r}"
    return None
