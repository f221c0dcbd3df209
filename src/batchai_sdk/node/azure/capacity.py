"""The capacity change of an Azure cluster, made from its head node without the client.

Standard library only (uploaded next to the scheduler and run by the nodes' own Python). The scale set
has a system-assigned managed identity holding Virtual Machine Contributor on that scale set only
(backends/azure/provision.py grants it); any of its VMs gets a token for it from the Instance Metadata
Service (IMDS) and calls ARM:

- ``POST .../virtualMachineScaleSets/{vmss}/delete`` with ``{"instanceIds": [...]}``: remove chosen nodes
  (the autoscale policy names them; the cloud never picks a busy one);
- ``PATCH .../virtualMachineScaleSets/{vmss}`` with ``{"sku": {"capacity": n}}``: grow.

The token is kept in memory only and never appears in a log line, a repr or an error message.
``BATCHAI_IMDS_URL`` / ``BATCHAI_ARM_URL`` point at other endpoints (the tests' local server).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IMDS_TOKEN_URL = "http://169.254.169.254/metadata/identity/oauth2/token"  # noqa: S105
ARM_URL = "https://management.azure.com"
IMDS_API_VERSION = "2018-02-01"
COMPUTE_API_VERSION = "2024-03-01"
RETRY_STATUSES = (429, 500, 502, 503, 504)


class CapacityError(Exception):
    """A token or ARM call failed. ``status`` (HTTP) and ``code`` (ARM's error code) when known."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        self.status = status
        self.code = code
        super().__init__(message)


@dataclass(frozen=True)
class ScaleSetRef:
    subscription_id: str
    resource_group: str
    name: str

    @property
    def resource_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}"
        )


def instance_id_of(node_id: str) -> str:
    """The scale-set instance id of a node id ``<vmss>_<instanceId>`` (the Azure backend's node ids)."""
    head, sep, tail = node_id.rpartition("_")
    if not sep or not head or not tail.isdigit():
        raise CapacityError(f"node id {node_id!r} is not <scale set>_<instance id>")
    return tail


@dataclass(frozen=True)
class Operation:
    """An accepted long-running ARM operation: where to poll it (``None`` when it completed at once)."""

    status: int
    poll_url: str | None


class AzureCapacity:
    """Scale one scale set with the VM's managed identity."""

    def __init__(
        self,
        scale_set: ScaleSetRef,
        *,
        imds_url: str | None = None,
        arm_url: str | None = None,
        client_id: str | None = None,  # a user-assigned identity; None: the system-assigned one
        timeout: float = 10.0,
        attempts: int = 3,
        backoff: float = 1.0,
    ) -> None:
        self.scale_set = scale_set
        self.imds_url = imds_url or os.environ.get("BATCHAI_IMDS_URL") or IMDS_TOKEN_URL
        self.arm_url = (arm_url or os.environ.get("BATCHAI_ARM_URL") or ARM_URL).rstrip("/")
        self.client_id = client_id
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self._token: tuple[str, float] | None = None  # (token, expires at) — never logged
        self._lock = threading.Lock()
        # IMDS must be reached directly, never through a proxy
        self._direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener()

    def __repr__(self) -> str:
        return f"AzureCapacity({self.scale_set.resource_id!r})"

    # -- token ----------------------------------------------------------------------------------------------
    def token(self) -> str:
        """An ARM access token of the VM's identity, from IMDS, reused until 5 minutes before it expires."""
        with self._lock:
            if self._token is not None and self._token[1] - 300 > time.time():
                return self._token[0]
            query = {"api-version": IMDS_API_VERSION, "resource": self.arm_url + "/"}
            if self.client_id:
                query["client_id"] = self.client_id
            url = self.imds_url + "?" + urllib.parse.urlencode(query)
            status, _, body = self._send(self._direct, "GET", url, {"Metadata": "true"}, None, "IMDS token")
            data = _json(body)
            token = data.get("access_token")
            if status != 200 or not isinstance(token, str) or not token:
                raise CapacityError("IMDS answered without an access token", status=status)
            try:
                expires = float(data.get("expires_on") or 0) or time.time() + float(
                    data.get("expires_in") or 0
                )
            except (TypeError, ValueError):
                expires = time.time() + 300
            self._token = (token, expires)
            return token

    # -- ARM ------------------------------------------------------------------------------------------------
    def _arm(self, method: str, path: str, body: Any, what: str) -> tuple[int, Mapping[str, str], bytes]:
        url = f"{self.arm_url}{path}"
        headers = {"Authorization": "Bearer " + self.token(), "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        status, resp_headers, resp = self._send(self._opener, method, url, headers, data, what)
        if status == 401:  # a token revoked or expired early: one fresh try
            with self._lock:
                self._token = None
            headers["Authorization"] = "Bearer " + self.token()
            status, resp_headers, resp = self._send(self._opener, method, url, headers, data, what)
        if status >= 400:
            err = _json(resp).get("error") or {}
            code = err.get("code") if isinstance(err, dict) else None
            message = err.get("message") if isinstance(err, dict) else None
            raise CapacityError(
                f"{what}: HTTP {status} {code or ''} {message or ''}".strip(),
                status=status,
                code=str(code) if code else None,
            )
        return status, resp_headers, resp

    def delete_instances(self, instance_ids: Sequence[str]) -> Operation:
        """Remove the named instances (``POST .../delete``); the scale set's capacity drops with them."""
        ids = [str(i) for i in instance_ids]
        if not ids:
            return Operation(200, None)
        path = f"{self.scale_set.resource_id}/delete?api-version={COMPUTE_API_VERSION}"
        what = f"delete instance(s) {', '.join(ids)} of scale set {self.scale_set.name}"
        status, headers, _ = self._arm("POST", path, {"instanceIds": ids}, what)
        return Operation(status, _poll_url(headers))

    def set_capacity(self, capacity: int) -> Operation:
        """Set the scale set's capacity (``PATCH`` of ``sku.capacity``): how it grows."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise CapacityError(f"capacity {capacity!r}: expected an integer >= 0")
        path = f"{self.scale_set.resource_id}?api-version={COMPUTE_API_VERSION}"
        what = f"set the capacity of scale set {self.scale_set.name} to {capacity}"
        status, headers, _ = self._arm("PATCH", path, {"sku": {"capacity": capacity}}, what)
        return Operation(status, _poll_url(headers))

    def apply(
        self,
        remove_node_ids: Sequence[str],
        target: int,
        current: int,
        *,
        timeout: float = 900.0,
        interval: float = 5.0,
    ) -> list[Operation]:
        """Carry out an autoscale decision: delete ``remove_node_ids``, then grow to ``target`` when the
        nodes left are fewer (a shrink is never a capacity change: the cloud would pick the nodes).

        When both, the deletion is waited for first (a capacity set while instances are still being
        deleted counts them and grows nothing). Returns the operations, the last one not waited for."""
        ops = []
        grow = target > current - len(remove_node_ids)
        if remove_node_ids:
            op = self.delete_instances([instance_id_of(n) for n in remove_node_ids])
            ops.append(op)
            if grow:
                state = self.wait(op, timeout=timeout, interval=interval)
                if state != "Succeeded":
                    raise CapacityError(f"deleting instances ended {state}; capacity left as it was")
        if grow:
            ops.append(self.set_capacity(target))
        return ops

    def wait(self, op: Operation, timeout: float = 600.0, interval: float = 5.0) -> str:
        """Poll an operation until it ends; returns its final status (``Succeeded``, ``Failed``, ...)."""
        if op.poll_url is None:
            return "Succeeded"
        deadline = time.monotonic() + timeout
        path = op.poll_url[len(self.arm_url) :] if op.poll_url.startswith(self.arm_url) else op.poll_url
        while True:
            status, _, body = self._arm("GET", path, None, "poll the scale set operation")
            state = str(_json(body).get("status") or ("Succeeded" if status in (200, 204) else "InProgress"))
            if state not in ("InProgress", "Running", "Accepted"):
                return state
            if time.monotonic() > deadline:
                raise CapacityError(f"scale set operation still {state} after {timeout:g}s")
            time.sleep(interval)

    # -- transport ---------------------------------------------------------------------------------------
    def _send(
        self,
        opener: urllib.request.OpenerDirector,
        method: str,
        url: str,
        headers: Mapping[str, str],
        data: bytes | None,
        what: str,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One HTTP call with retries on 429/5xx/transport errors; returns (status, headers, body)."""
        last: str = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(url, data=data, headers=dict(headers), method=method)  # noqa: S310
            try:
                with opener.open(req, timeout=self.timeout) as resp:
                    return resp.status, dict(resp.headers.items()), resp.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
                if status not in RETRY_STATUSES or attempt == self.attempts - 1:
                    return status, dict(exc.headers.items()), body
                last = f"HTTP {status}"
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
        raise CapacityError(f"{what}: no answer after {self.attempts} attempt(s) ({last})")


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _poll_url(headers: Mapping[str, str]) -> str | None:
    lower = {k.lower(): v for k, v in headers.items()}
    return lower.get("azure-asyncoperation") or lower.get("location")
