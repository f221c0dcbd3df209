"""Azure Spot / low-priority eviction notices from the Instance Metadata Service (standard library only).

An Azure VM learns that it is about to be taken from the Scheduled Events document::

    GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01     (header Metadata: true)
    {"DocumentIncarnation": 2,
     "Events": [{"EventId": "C7061BAC-...", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                 "Resources": ["myvmss_3"], "EventStatus": "Scheduled",
                 "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT", "Description": "...",
                 "EventSource": "Platform", "DurationInSeconds": -1}]}

A ``Preempt`` event (Spot eviction) comes at least 30 s before ``NotBefore``; ``Terminate`` (scale-in, delete)
is handled the same way. The node agent runs ``watch(on_notice, interval=..., stop_event=...)`` in a thread:
``on_notice`` gets an ``EvictionNotice`` for each new event naming this VM (its name comes from
``/metadata/instance/compute/name``). It should tell the scheduler (requeue, not fail), then call
``evict(notice, pids)``: SIGTERM to the node's ranks (they checkpoint), a wait for them until shortly before
``NotBefore``, and ``acknowledge(notice.event_id)``, which lets Azure go ahead without waiting longer.

The base URL is ``$BATCHAI_IMDS_URL`` when set (tests serve documents from 127.0.0.1), else
``http://169.254.169.254``. Requests never go through a proxy, as Azure requires for the metadata service.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "DEFAULT_GRACE",
    "EVICTION_EVENT_TYPES",
    "IMDS_URL_VARIABLE",
    "EvictionNotice",
    "ImdsError",
    "acknowledge",
    "evict",
    "find_notice",
    "find_notices",
    "get_scheduled_events",
    "get_vm_name",
    "imds_base_url",
    "pid_alive",
    "poll",
    "terminate_and_wait",
    "watch",
]

DEFAULT_IMDS_URL = "http://169.254.169.254"
IMDS_URL_VARIABLE = "BATCHAI_IMDS_URL"
SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents?api-version=2020-07-01"
VM_NAME_PATH = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
EVICTION_EVENT_TYPES = ("Preempt", "Terminate")

# The metadata service is link-local: never through a proxy (HTTP_PROXY would break it).
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ImdsError(Exception):
    """The metadata service did not answer, or answered something that is not a Scheduled Events document."""


@dataclass(frozen=True)
class EvictionNotice:
    """One Scheduled Event that takes this VM away."""

    event_id: str
    event_type: str  # "Preempt" or "Terminate"
    not_before: datetime | None  # None once the event has started (NotBefore is then "")
    resources: tuple[str, ...]
    status: str = "Scheduled"
    description: str = ""
    source: str = ""
    document_incarnation: int | None = None

    def seconds_left(self, now: datetime) -> float | None:
        """Seconds until ``not_before`` from ``now`` (timezone-aware); None when there is no NotBefore."""
        return None if self.not_before is None else (self.not_before - now).total_seconds()

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "not_before": self.not_before.isoformat() if self.not_before else None,
            "resources": list(self.resources),
            "status": self.status,
            "description": self.description,
            "source": self.source,
            "document_incarnation": self.document_incarnation,
        }


def imds_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``$BATCHAI_IMDS_URL``, else the real metadata address; no trailing slash."""
    url = (base_url or os.environ.get(IMDS_URL_VARIABLE) or DEFAULT_IMDS_URL).rstrip("/")
    if urllib.parse.urlsplit(url).scheme != "http":
        raise ImdsError(f"the metadata service URL must be http://host[:port], got {url!r}")
    return url


def _request(url: str, *, data: bytes | None = None, timeout: float) -> bytes:
    headers = {"Metadata": "true"}
    if data is not None:
        headers["Content-Type"] = "application/json"
    method = "POST" if data is not None else "GET"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 (http only)
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        raise ImdsError(f"{request.method} {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise ImdsError(f"{request.method} {url}: {exc}") from exc


def get_vm_name(base_url: str | None = None, *, timeout: float = 5.0) -> str:
    """This VM's name as the metadata service gives it (``compute.name``), as Scheduled Events name it."""
    body = _request(imds_base_url(base_url) + VM_NAME_PATH, timeout=timeout)
    name = body.decode("utf-8", errors="replace").strip()
    if not name:
        raise ImdsError("the metadata service returned an empty VM name")
    return name


def get_scheduled_events(base_url: str | None = None, *, timeout: float = 5.0) -> dict[str, Any]:
    """The Scheduled Events document. The first call on a VM may take a while: it enables the service."""
    url = imds_base_url(base_url) + SCHEDULED_EVENTS_PATH
    body = _request(url, timeout=timeout)
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise ImdsError(f"GET {url}: not JSON ({exc})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("Events", []), list):
        raise ImdsError(f"GET {url}: not a Scheduled Events document: {body[:200]!r}")
    return document


def _not_before(text: object) -> datetime | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None


def find_notices(document: Mapping[str, Any], vm_name: str) -> list[EvictionNotice]:
    """The ``Preempt`` and ``Terminate`` events of ``document`` whose Resources include ``vm_name``.

    Events of other types (Reboot, Redeploy, Freeze) and events for other VMs are left out. Names compare
    case-insensitively (Azure resource names are). In the document's order.
    """
    incarnation = document.get("DocumentIncarnation")
    found = []
    for event in document.get("Events") or []:
        if not isinstance(event, Mapping) or event.get("EventType") not in EVICTION_EVENT_TYPES:
            continue
        resources = tuple(str(r) for r in event.get("Resources") or [])
        if vm_name.lower() not in (r.lower() for r in resources):
            continue
        found.append(
            EvictionNotice(
                event_id=str(event.get("EventId", "")),
                event_type=str(event["EventType"]),
                not_before=_not_before(event.get("NotBefore")),
                resources=resources,
                status=str(event.get("EventStatus", "")),
                description=str(event.get("Description", "")),
                source=str(event.get("EventSource", "")),
                document_incarnation=incarnation if isinstance(incarnation, int) else None,
            )
        )
    return found


def find_notice(document: Mapping[str, Any], vm_name: str) -> EvictionNotice | None:
    """The first eviction notice for ``vm_name`` in ``document`` (see ``find_notices``), or None."""
    notices = find_notices(document, vm_name)
    return notices[0] if notices else None


def poll(vm_name: str, base_url: str | None = None, *, timeout: float = 5.0) -> list[EvictionNotice]:
    """One look at the Scheduled Events: the eviction notices for ``vm_name`` (usually none, or one)."""
    return find_notices(get_scheduled_events(base_url, timeout=timeout), vm_name)


def acknowledge(event_id: str, base_url: str | None = None, *, timeout: float = 5.0) -> None:
    """Approve the event now (``{"StartRequests": [{"EventId": ...}]}``), once the job has checkpointed."""
    body = json.dumps({"StartRequests": [{"EventId": event_id}]}).encode()
    _request(imds_base_url(base_url) + SCHEDULED_EVENTS_PATH, data=body, timeout=timeout)


DEFAULT_GRACE = 25.0  # seconds the ranks get when the notice has no NotBefore (Azure Spot gives >= 30)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X", b"")


def terminate_and_wait(pids: list[int], deadline: float, *, poll_interval: float = 0.05) -> list[int]:
    """SIGTERM to ``pids``, then wait until they have all ended or ``deadline`` (time.monotonic()) passes.

    Returns the pids still running at the deadline (the caller decides: SIGKILL, or let the platform take
    the VM). Processes that are already gone are fine.
    """
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    left = [p for p in pids if pid_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(poll_interval)
        left = [p for p in left if pid_alive(p)]
    return left


def evict(
    notice: EvictionNotice,
    pids: list[int],
    *,
    base_url: str | None = None,
    margin: float = 5.0,
    now: datetime | None = None,
    timeout: float = 5.0,
) -> list[int]:
    """What the node agent does with a notice: SIGTERM the node's ranks, wait for them, acknowledge.

    The ranks get until ``margin`` seconds before the event's NotBefore (``DEFAULT_GRACE`` when it has none,
    at least 1 s), so that they can checkpoint; then the event is acknowledged, whether or not they are done
    (Azure takes the VM at NotBefore anyway). Returns the pids still running when it was acknowledged. Tell
    the scheduler about the eviction before calling this, so the job is requeued rather than failed when
    its ranks exit.
    """
    left_s = notice.seconds_left(now or datetime.now(timezone.utc))
    grace = DEFAULT_GRACE if left_s is None else max(1.0, left_s - margin)
    still_running = terminate_and_wait(pids, time.monotonic() + grace)
    acknowledge(notice.event_id, base_url, timeout=timeout)
    return still_running


def watch(
    on_notice: Callable[[EvictionNotice], None],
    *,
    interval: float,
    stop_event: threading.Event,
    base_url: str | None = None,
    vm_name: str | None = None,
    on_error: Callable[[ImdsError], None] | None = None,
    timeout: float = 5.0,
) -> None:
    """Poll every ``interval`` seconds until ``stop_event`` is set; ``on_notice`` once per new event id.

    Errors of the metadata service (not answering yet, a bad document) go to ``on_error`` and the loop goes
    on; the VM name is asked for until it is known. An exception raised by ``on_notice`` propagates (and
    ends the loop): the caller's handler has to be trusted to deal with its own failures.
    """
    seen: set[str] = set()
    name = vm_name
    while not stop_event.is_set():
        try:
            if name is None:
                name = get_vm_name(base_url, timeout=timeout)
            notices = poll(name, base_url, timeout=timeout)
        except ImdsError as exc:
            if on_error is not None:
                on_error(exc)
            notices = []
        for notice in notices:
            if notice.event_id not in seen:
                seen.add(notice.event_id)
                on_notice(notice)
        stop_event.wait(interval)
