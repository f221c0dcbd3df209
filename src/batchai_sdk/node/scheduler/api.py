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
from collections.abc import Mapping
from typing import Any

from ..protocol.cluster import check_cluster
from ..protocol.fields import MAX_ITEMS, RequestError, invalid
from ..protocol.names import NAME as NAME  # not their users' modules: ctl imports this one
from ..protocol.names import OPS
from ..protocol.requests import check_job_ref, check_submit

MAX_REQUEST = 1 << 20  # bytes of one request line: secrets and a cluster of thousands of nodes fit
MAX_DEPTH = 8
MAX_TEXT = 65_536  # characters of one string


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


def request_digest(request: Mapping[str, Any]) -> str:
    """What a checked submit asks for, as a digest its ``request_id`` is bound to: every field but the
    id, the cluster (the client's view, sent with every call) and the secrets' values (their names count;
    a digest of a secret is not stored)."""
    content = {k: v for k, v in request.items() if k not in ("op", "request_id", "cluster", "no_start")}
    content["secrets"] = sorted(request.get("secrets") or {})
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


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
