"""Who may change a node's health: the reports the scheduler trusts, and how it tells them.

A report changes placement only when this cluster's scheduler signed it: its own gate's, or one the admin
sent through the scheduler (``check_nodes``, ``batchai cluster check``, ``Cluster.apply_health_report``;
the ``health`` request). The signature is an HMAC-SHA256 over the report's canonical JSON with a key only
the scheduler holds (``health.key`` in its node-local state folder, 0600), so a report a job writes into the
cluster's ``health/`` folder on the share (which jobs can write) is data, never an instruction.

Every report is bounded before it is believed: a regular file (opened without blocking, so a FIFO cannot
stall the loop), at most ``MAX_BYTES``, nested at most ``MAX_DEPTH`` levels, its reasons and details
clipped to ``MAX_REASON`` characters before they reach ``nodes.json``, events and the log.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from typing import Any

from ..protocol.fields import NODE_ID, RequestError, invalid
from ..protocol.names import LEVELS

KEY_FILE = "health.key"
SIGNATURE = "hmac"
MAX_BYTES = 64 * 1024  # one report: a thousand nodes' lines fit
MAX_REASON = 512  # characters of one reason, detail or note
MAX_DEPTH = 6
MAX_ENTRIES = 4096


def clip(text: object, limit: int = MAX_REASON) -> str:
    """``text`` as one bounded line: at most ``limit`` characters, control characters replaced."""
    out = "".join(c if c.isprintable() else " " for c in str(text)[: limit + 1])
    return out if len(out) <= limit else out[: limit - 3] + "..."


def load_key(state_dir: str) -> bytes:
    """The scheduler's signing key, made (32 random bytes, 0600) the first time."""
    path = os.path.join(state_dir, KEY_FILE)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    with open(path, encoding="ascii") as f:
        return bytes.fromhex(f.read().strip())


def _canonical(report: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in report.items() if k != SIGNATURE}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def sign(key: bytes, report: Mapping[str, Any]) -> dict[str, Any]:
    return {**report, SIGNATURE: hmac.new(key, _canonical(report), hashlib.sha256).hexdigest()}


def signed(key: bytes, report: Mapping[str, Any]) -> bool:
    given = report.get(SIGNATURE)
    if not isinstance(given, str):
        return False
    try:
        want = hmac.new(key, _canonical(report), hashlib.sha256).hexdigest()
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(given, want)


def _depth(value: Any, level: int = 0) -> None:
    if level > MAX_DEPTH:
        raise invalid("report", "...", f"a report nested at most {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for item in value.values():
            _depth(item, level + 1)
    elif isinstance(value, list):
        for item in value:
            _depth(item, level + 1)


def normalize(doc: object) -> dict[str, Any]:
    """The report with its fields checked and bounded (``RequestError`` naming the field otherwise)."""
    if not isinstance(doc, dict):
        raise invalid("report", type(doc).__name__, "a health report object")
    _depth(doc)
    level = doc.get("level", "basic")
    if level not in LEVELS:
        raise invalid("report.level", level, f"one of {', '.join(LEVELS)}")
    nodes = doc.get("nodes") or []
    if not isinstance(nodes, list) or len(nodes) > MAX_ENTRIES:
        raise invalid("report.nodes", "...", "a list of node ids")
    for node in nodes:
        if not isinstance(node, str) or not NODE_ID.match(node):
            raise invalid("report.nodes", node, "node ids")
    unusable = doc.get("unusable") or {}
    if not isinstance(unusable, dict) or not all(isinstance(k, str) and NODE_ID.match(k) for k in unusable):
        raise invalid("report.unusable", "...", "an object of node ids to reasons")
    checks = doc.get("checks") or []
    if not isinstance(checks, list) or len(checks) > MAX_ENTRIES:
        raise invalid("report.checks", "...", "a list of checks")
    if any(not isinstance(c, dict) for c in checks):
        raise invalid("report.checks", "...", "a list of checks")
    notes = doc.get("notes") or []
    if not isinstance(notes, list) or len(notes) > MAX_ENTRIES:
        raise invalid("report.notes", "...", "a list of notes")
    started = doc.get("started")
    if started is not None and (isinstance(started, bool) or not isinstance(started, int | float)):
        raise invalid("report.started", started, "a time in seconds")
    out = {
        "level": level,
        "nodes": list(nodes),
        "checks": [
            {
                "node": clip(c.get("node", ""), 256),
                "name": clip(c.get("name", ""), 64),
                "ok": bool(c.get("ok")),
                "detail": clip(c.get("detail", "")),
                "line": clip(c.get("line", "")),
            }
            for c in checks
        ],
        "unusable": {k: clip(v) for k, v in unusable.items()},
        "notes": [clip(n) for n in notes],
    }
    if doc.get("trigger") in ("join", "job", "admin", "source"):  # which check: a failed join is retried
        out["trigger"] = doc["trigger"]
    for key in ("started", "seconds"):
        value = doc.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
            out[key] = float(value)
    return out


def untrusted(info: os.stat_result) -> str | None:
    """Why a file or folder of the owner's health source cannot be trusted, or None: it must belong to
    root or to this scheduler's user and be writable by no one else (no group or other write bit)."""
    if info.st_uid not in (0, os.geteuid()):
        return f"owned by uid {info.st_uid}, not root or the scheduler's user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def untrusted_path(path: str) -> str | None:
    """Why the folder ``path`` cannot be trusted, or None: it and every folder above it pass ``untrusted``
    (a folder others may write but whose sticky bit keeps them from renaming its entries, as /tmp, is
    allowed above it), so no one else can put another folder in its place."""
    real = os.path.realpath(path)
    parts = [real]
    while parts[-1] != os.path.dirname(parts[-1]):
        parts.append(os.path.dirname(parts[-1]))
    for i, folder in enumerate(parts):
        info = os.stat(folder)
        why = untrusted(info)
        sticky = i > 0 and info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.geteuid())
        if why is not None and not sticky:
            return f"{clip(folder, 200)}: {why}"
    return None


def read_bounded(path: str, *, owned: bool = False) -> dict[str, Any]:
    """The JSON object in the regular file ``path``, at most ``MAX_BYTES``; OSError/ValueError otherwise.
    Opened without blocking and not through a link: a FIFO or a device at that name is refused at once.
    ``owned``: the file must also pass ``untrusted`` (a health source's report)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        why = untrusted(info) if owned else None
        if why is not None:
            raise PermissionError(errno.EPERM, why)
        if info.st_size > MAX_BYTES:
            raise ValueError(f"{info.st_size} bytes, more than {MAX_BYTES}")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"more than {MAX_BYTES} bytes")
    try:
        doc = json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def check_request_report(doc: object) -> dict[str, Any]:
    """The ``report`` of a ``health`` request, bounded as a file's would be."""
    try:
        size = len(json.dumps(doc))
    except (TypeError, ValueError) as exc:
        raise RequestError("invalid", f"report: not JSON ({exc})") from None
    if size > MAX_BYTES:
        raise RequestError("invalid", f"report: {size} bytes, more than {MAX_BYTES}")
    return normalize(doc)
