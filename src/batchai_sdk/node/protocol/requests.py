"""The scheduler's socket: what a request names and what a reply says, as ``TypedDict``s (JSON on the wire),
the codes of a refused request, one check per request (``check_submit``, ``check_job_ref``: the bytes the
scheduler got, field by field, into these types) and ``check_reply``, how a client reads a reply. The
client builds them, so a field spelled differently on either side is a type error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast

from .fields import (
    ENV_NAME,
    MAX_ITEMS,
    PRINTABLE,
    REQUEST_ID,
    WEEKS_52,
    integer,
    invalid,
    name,
    number,
    string_map,
    text,
)
from .names import E_NEEDS_CLUSTER as E_NEEDS_CLUSTER
from .names import PRIORITIES

# ctl: the error codes of a refused request
E_EXISTS, E_CAPACITY, E_INVALID, E_UNAVAILABLE = "exists", "capacity", "invalid", "unavailable"
E_REQUEST_REUSED = "request_id_reused"  # a request_id already named a submit with other content
E_NO_REPLY = "no_reply"  # what came back is not a reply (a client's reading; never sent)


class JobRef(TypedDict):
    """The job a control call (``terminate``, ``job``) names: all it carries."""

    experiment: str
    name: str


class SubmitRequest(TypedDict):
    """A job for the queue (``op`` ``submit``), as the client sends it and ``api.check_submit`` returns it
    (numbers as float, absent lists empty). The cluster's configuration travels beside it."""

    op: str
    experiment: str
    name: str
    request_id: str | None
    node_count: int
    max_wall_clock_seconds: float | None
    created: str | None
    hang_timeout: float | None
    hang_notice: float | None
    max_retries: int
    retry_on_exit_codes: list[int]
    max_cost: float | None
    price: float | None
    scheduling_priority: str | None
    secrets: dict[str, str]


class Reply(TypedDict, total=False):
    """A scheduler's reply: ``ok``, or the refusal's ``error`` code (``E_*``) and ``message``; the rest as
    the operation gives it (submit: ``id``, ``key``, ``repeated``; job and terminate: ``found`` and the
    job's ``state``, ``exit_code``, ``failure_reason``, ``end_time``; ping: ``pid``, ``protocol``)."""

    ok: bool
    error: str
    message: str
    id: int
    key: str
    repeated: bool
    found: bool
    state: str
    exit_code: int | None
    failure_reason: str | None
    end_time: str | None
    pid: int
    protocol: int
    running: bool


_REPLY_TYPES: dict[str, tuple[type, ...]] = {
    "ok": (bool,),
    "error": (str,),
    "message": (str,),
    "id": (int,),
    "key": (str,),
    "repeated": (bool,),
    "found": (bool,),
    "state": (str,),
    "exit_code": (int, type(None)),
    "failure_reason": (str, type(None)),
    "end_time": (str, type(None)),
    "pid": (int,),
    "protocol": (int,),
    "running": (bool,),
}


def check_reply(doc: Any) -> Reply:
    """A reply as the client reads it: its known fields of their types (a field of another type is
    dropped, as a newer scheduler's unknown ones are); anything but a JSON object is a refusal
    ``no_reply``."""
    if not isinstance(doc, dict):
        return {"ok": False, "error": E_NO_REPLY, "message": f"not a reply: {str(doc)[:200]!r}"}
    out: dict[str, Any] = {}
    for key, types in _REPLY_TYPES.items():
        value = doc.get(key)
        if key in doc and isinstance(value, types) and not (bool in types) ^ isinstance(value, bool):
            out[key] = value
    out["ok"] = out.get("ok") is True
    return cast(Reply, out)  # each key checked against its type above


def check_job_ref(doc: Mapping[str, Any]) -> JobRef:
    """The job a control call names."""
    ref: JobRef = {"experiment": name(doc, "experiment"), "name": name(doc, "name")}
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
        "experiment": name(doc, "experiment"),
        "name": name(doc, "name"),
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
