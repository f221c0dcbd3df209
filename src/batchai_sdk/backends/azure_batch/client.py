"""The Batch account's data plane through the real ``azure-batch`` (15.x) client: bodies in and out as
REST JSON, errors translated once (Batch's own error shape, ``{"code", "message": {"value"}, "values"}``),
quota refusals as ``AzureQuotaError`` with what to do.

Task files are read with a ranged GET sent through the client's own pipeline (authentication, retries):
``download_task_file`` of azure-batch 15.1 sends only ``ocp-range`` and accepts nothing but ``200``, so a
service or proxy that honours the range with ``206 Partial Content`` would fail it. We send the standard
``Range`` header too and take ``200`` (``Tasks_GetTaskFile``: the range's bytes; a body longer than the
range is a whole file, sliced here), ``206`` and ``416`` (past the end).

Resize, delete and terminate are sent as the single REST call (``202 Accepted``) through the client's
``_..._internal`` operations: the public ``begin_...`` wrappers start a polling thread that lives until the
service finishes (minutes for a pool deletion), long after the call returned. Like the scale-set engine's
ARM operations, we return once the service accepted the request and read the outcome on later calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from ...exceptions import AlreadyExistsError, AzureError, AzureQuotaError, BatchAIError
from ..azure import _sdk
from ..azure.clients import ClientOptions
from ..azure.errors import json_mapping, scrub, translate
from ..azure.provision import _dict  # the REST JSON of an SDK model
from .models import bm

_QUOTA_CODES = {
    "PoolQuotaReached": "the Batch account's pool quota is reached: delete a cluster, or request a larger "
    "pool quota (Azure portal → the Batch account → Quotas)",
    "ActiveJobAndScheduleQuotaReached": "the Batch account's active job quota is reached: wait for jobs "
    "to end, or request a larger quota (Azure portal → the Batch account → Quotas)",
    "AccountCoreQuotaReached": "the Batch account's dedicated core quota is reached: ask for fewer nodes "
    "or a smaller vm_size, or request more cores (Azure portal → the Batch account → Quotas)",
    "AccountLowPriorityCoreQuotaReached": "the Batch account's Spot core quota is reached: ask for fewer "
    "Spot nodes, or request more Spot cores (Azure portal → the Batch account → Quotas)",
    "AccountVMFamilyCoreQuotaReached": "the Batch account's core quota of this VM family is reached: "
    "request more cores of that family (Azure portal → the Batch account → Quotas) or choose another size",
    "AllocationFailed": "Azure has no capacity for this VM size here right now: retry later, or choose "
    "another vm_size or location",
}
_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def batch_error(body: Any) -> tuple[str | None, str | None]:
    """(code, message) of a Batch error body (REST JSON text or dict), with its ``values`` details."""
    body = json_mapping(body)
    if body is None:
        return None, None
    code = body.get("code")
    message = body.get("message")
    if isinstance(message, Mapping):
        message = message.get("value")
    details = [
        f"{v.get('key')}: {v.get('value')}" for v in body.get("values") or () if isinstance(v, Mapping)
    ]
    text = str(message or "").split("\n")[0] + (f" ({'; '.join(details)})" if details else "")
    return (str(code) if code else None), (text or None)


def _terminate_options(reason: str) -> Any:
    """``BatchJobTerminateOptions``: azure-batch 15.1 keeps it out of ``azure.batch.models``' exports."""
    return _sdk.load("azure.batch.models._models").BatchJobTerminateOptions(termination_reason=reason)


def quota_error(code: str, message: str, operation: str) -> AzureQuotaError | None:
    hint = _QUOTA_CODES.get(code)
    if hint is None:
        return None
    return AzureQuotaError(
        f"{operation} failed: {code}: {message} — {hint}", code=code, status=None, hint=hint
    )


class BatchService:
    """One Batch account's data plane. ``secrets()`` returns the values scrubbed from every error."""

    def __init__(
        self,
        endpoint: str,
        credential: Any,
        options: ClientOptions,
        *,
        secrets: Callable[[], tuple[str, ...]] = tuple,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        kwargs = options.kwargs()
        kwargs.pop("polling_interval", None)  # no LRO is polled (see above)
        self.client = _sdk.batch().BatchClient(self.endpoint, credential, **kwargs)
        self._secrets = secrets

    def close(self) -> None:
        self.client.close()

    @contextmanager
    def call(self, operation: str, *, exists: str | None = None) -> Iterator[None]:
        """Translate errors raised inside; ``exists`` names the kind a 409 ``...Exists`` is about."""
        ex = _sdk.core_exceptions()
        try:
            yield
        except BatchAIError:
            raise
        except ex.HttpResponseError as exc:
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", None)
            try:
                code, message = batch_error(response.text() if response is not None else None)
            except Exception:
                code, message = None, None
            message = scrub(message or str(exc).split("\n")[0], self._secrets())
            if exists and status == 409 and code and code.endswith("Exists"):
                raise AlreadyExistsError(exists, operation, "the Batch account") from exc
            quota = quota_error(code or "", message, operation)
            if quota is not None:
                raise quota from exc
            raise AzureError(
                f"{operation} failed: {code + ': ' if code else ''}{message}", code=code, status=status
            ) from exc
        except ex.AzureError as exc:
            raise translate(exc, operation, secrets=self._secrets()) from exc

    # -- pools -------------------------------------------------------------------------------------------
    def list_pools(self) -> list[dict[str, Any]]:
        with self.call("list the Batch account's pools"):
            return [_dict(p) for p in self.client.list_pools()]

    def get_pool(self, pool_id: str) -> dict[str, Any] | None:
        ex = _sdk.core_exceptions()
        try:
            with self.call(f"read pool {pool_id}"):
                return _dict(self.client.get_pool(pool_id))
        except AzureError as exc:
            if exc.status == 404 or isinstance(exc.__cause__, ex.ResourceNotFoundError):
                return None
            raise

    def create_pool(self, body: bm.BatchPoolCreateOptions) -> bool:
        """Add the pool; False when a pool of that id exists already."""
        try:
            with self.call(f"create pool {body.id}", exists="pool"):
                self.client.create_pool(body)
        except AlreadyExistsError:
            return False
        return True

    def resize_pool(self, pool_id: str, nodes: int, *, spot: bool) -> None:
        body = bm.BatchPoolResizeOptions(
            target_dedicated_nodes=0 if spot else nodes,
            target_low_priority_nodes=nodes if spot else 0,
            node_deallocation_option=bm.BatchNodeDeallocationOption.TASK_COMPLETION,
        )
        with self.call(f"resize pool {pool_id} to {nodes}"):
            self.client._resize_pool_internal(pool_id, body)

    def disable_autoscale(self, pool_id: str) -> None:
        with self.call(f"turn autoscale off on pool {pool_id}"):
            self.client.disable_pool_auto_scale(pool_id)

    def enable_autoscale(
        self, pool_id: str, formula: str, interval: timedelta = timedelta(minutes=5)
    ) -> None:
        body = bm.BatchPoolEnableAutoScaleOptions(
            auto_scale_formula=formula, auto_scale_evaluation_interval=interval
        )
        with self.call(f"turn autoscale on on pool {pool_id}"):
            self.client.enable_pool_auto_scale(pool_id, body)

    def delete_pool(self, pool_id: str) -> None:
        try:
            with self.call(f"delete pool {pool_id}"):
                self.client._delete_pool_internal(pool_id)
        except AzureError as exc:
            if exc.status != 404:
                raise

    def list_nodes(self, pool_id: str) -> list[dict[str, Any]]:
        with self.call(f"list the nodes of pool {pool_id}"):
            return [_dict(n) for n in self.client.list_nodes(pool_id)]

    # -- jobs and tasks ----------------------------------------------------------------------------------
    def create_job(self, body: bm.BatchJobCreateOptions) -> None:
        with self.call(f"create Batch job {body.id}", exists="job"):
            self.client.create_job(body)

    def update_job(self, job_id: str, body: bm.BatchJobUpdateOptions) -> None:
        """PATCH the job's given properties (``Jobs_UpdateJob``)."""
        with self.call(f"update Batch job {job_id}"):
            self.client.update_job(job_id, body)

    def delete_job(self, job_id: str) -> None:
        try:
            with self.call(f"delete Batch job {job_id}"):
                self.client._delete_job_internal(job_id)
        except AzureError as exc:
            if exc.status != 404:
                raise

    def terminate_job(self, job_id: str, reason: str) -> bool:
        """Terminate the job and its running task; False when it is gone or had completed."""
        try:
            with self.call(f"terminate Batch job {job_id}"):
                self.client._terminate_job_internal(job_id, _terminate_options(reason))
        except AzureError as exc:
            if exc.status == 404 or exc.code in ("JobCompleted", "JobNotFound"):
                return False
            raise
        return True

    def list_jobs(self) -> list[dict[str, Any]]:
        with self.call("list the Batch account's active jobs"):
            return [_dict(j) for j in self.client.list_jobs(filter="state eq 'active'")]

    def create_task(self, job_id: str, body: bm.BatchTaskCreateOptions) -> None:
        with self.call(f"add the task of Batch job {job_id}", exists="task"):
            self.client.create_task(job_id, body)

    def get_task(self, job_id: str, task_id: str) -> dict[str, Any] | None:
        try:
            with self.call(f"read task {task_id} of Batch job {job_id}"):
                return _dict(self.client.get_task(job_id, task_id))
        except AzureError as exc:
            if exc.status == 404:
                return None
            raise

    def list_subtasks(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        with self.call(f"list the subtasks of task {task_id} of Batch job {job_id}"):
            return [_dict(s) for s in self.client.list_subtasks(job_id, task_id)]

    def list_task_files(self, job_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every file and folder of the task's directory on its node (``recursive=true``)."""
        with self.call(f"list the files of task {task_id} of Batch job {job_id}"):
            return [_dict(f) for f in self.client.list_task_files(job_id, task_id, recursive=True)]

    def read_task_file(self, job_id: str, task_id: str, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of a task file from ``offset`` (b"" past its end)."""
        if length <= 0:
            return b""
        rest = _sdk.load("azure.core.rest")
        end = offset + length - 1
        url = (
            f"{self.endpoint}/jobs/{quote(job_id, safe='')}/tasks/{quote(task_id, safe='')}"
            f"/files/{quote(path, safe='')}?api-version={self.client._config.api_version}"
        )
        request = rest.HttpRequest(
            "GET", url, headers={"Range": f"bytes={offset}-{end}", "ocp-range": f"bytes={offset}-{end}"}
        )
        ex = _sdk.core_exceptions()
        with self.call(f"read {path} of task {task_id} of Batch job {job_id}"):
            try:  # the client's error policy raises for a 4xx before we see the response
                response = self.client.send_request(request, stream=True)
                response.raise_for_status()
            except ex.HttpResponseError as exc:
                if getattr(exc.response, "status_code", None) == 416:  # the range starts past the end
                    return b""
                raise
            data: bytes = response.read()
        if response.status_code == 206:
            found = _RANGE_RE.match(response.headers.get("Content-Range", ""))
            if found is None or int(found.group(1)) != offset:
                raise AzureError(
                    f"read {path} of task {task_id}: the service answered another range "
                    f"({response.headers.get('Content-Range')!r} for bytes={offset}-{end})",
                    code="BadRange",
                    status=206,
                )
            return data[:length]
        # 200 is the spec's answer to ``ocp-range``: the bytes of the range asked for (fewer at the end of
        # the file). A body longer than the range is the whole file from a server that ignored it.
        return data[offset : offset + length] if len(data) > length else data

    def task_file_size(self, job_id: str, task_id: str, path: str) -> int | None:
        try:
            with self.call(f"read the size of {path} of task {task_id}"):
                props = self.client.get_task_file_properties(job_id, task_id, path)
        except AzureError as exc:
            if exc.status == 404:
                return None
            raise
        return int(getattr(props, "content_length", None) or 0)
