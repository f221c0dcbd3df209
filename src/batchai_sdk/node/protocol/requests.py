"""The scheduler's socket: what a request names and what a reply says, as ``TypedDict``s (JSON on the wire;
``scheduler/api.py``, which ``ctl`` loads, imports them for type checking only), the codes of a refused
request, and ``check_reply``, how a client reads a reply. The scheduler checks a request's fields in
``scheduler/api.py`` (``check_submit``, ``check_job_ref``), which returns these types; the client builds
them, so a field spelled differently on either side is a type error."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from .names import E_NEEDS_CLUSTER as E_NEEDS_CLUSTER

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
