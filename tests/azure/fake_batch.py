"""A stateful fake of Azure Batch, served through ``responses`` to the real ``azure-batch`` 15.x and
``azure-mgmt-batch`` clients.

- ``FakeBatchArm``: the fake ARM plus ``Microsoft.Batch/batchAccounts`` (get, create, delete), answering in
  the shape of the ``BatchAccountGet``/``BatchAccountCreate_Default`` examples (2024-07-01), with the
  account's core quotas settable (``account_properties``).
- ``FakeBatchService``: the account's data plane, ``https://<account>.eastus.batch.azure.com``, by the
  REST spec of the version azure-batch 15.x sends (2025-06-01, ``tests/data/batch_spec``): every request
  body of an operation the spec excerpt lists is checked against its definitions (jsonschema; a property
  the spec does not declare is an error, as Azure's oav has it) and refused with ``400
  InvalidRequestBody`` naming the property; ``checked_bodies``/``invalid_bodies`` keep them. Pools (add,
  get, list, resize, enable/disable autoscale, delete), their nodes, jobs (add, list, update, terminate,
  delete; ``onAllTasksComplete: terminatejob`` ends a job once every task completed — at once for a job
  with no task, as the spec warns), tasks (add, get, subtasks; ``previousState`` kept) and task files
  (HEAD; GET answering ``ocp-range`` with ``200`` and those bytes as ``Tasks_GetTaskFile``, ``416`` past
  the end; ``ranges`` = ``"206"``/``"whole"`` play fronts that answer ``Range`` or ignore it). Jobs,
  tasks, nodes, file listings and file headers start from the official ``x-ms-examples`` responses
  (``tests/data/batch_spec/examples``), ids and state adapted. Errors are Batch's
  ``{"code", "message": {"lang", "value"}}``. Tests move state on: node states, a task's state and
  execution info, files — ``inject`` queues canned answers (quota refusals).
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any

import responses
from fake_arm import FakeArm, Injected, now, read_request, take_injected
from spec_bodies import SpecBodies

SPEC = Path(__file__).resolve().parents[1] / "data" / "batch_spec" / "definitions-2025-06-01.json"
SPEC_BODIES = SpecBodies(SPEC, ignore_case=False, separator="/")
EXAMPLES = SPEC.parent / "examples"


def example(operation: str, index: int | None = None) -> Any:
    """The ``200`` response body of an official example (``value[index]`` of a list), a fresh copy."""
    body = json.loads((EXAMPLES / f"{operation}.json").read_text())["responses"]["200"]["body"]
    return copy.deepcopy(body["value"][index] if index is not None else body)


def example_headers(operation: str) -> dict[str, str]:
    answer = json.loads((EXAMPLES / f"{operation}.json").read_text())["responses"]["200"]
    return {k: v for k, v in answer.items() if k != "body"}


# Measuring (scripts/, the count): each checked body is appended to this file, none refused
MEASURE = os.environ.get("BATCHAI_FAKE_BATCH_BODIES")

Reply = tuple[int, dict[str, str], Any]


def batch_error(status: int, code: str, message: str) -> Reply:
    body = {
        "odata.metadata": "https://account.region.batch.azure.com/$metadata#Microsoft.Azure.Batch.Protocol.Entities.Container.errors/@Element",
        "code": code,
        "message": {"lang": "en-US", "value": message},
    }
    return status, {"Content-Type": "application/json;odata=minimalmetadata"}, json.dumps(body)


DEFAULT_ACCOUNT_PROPERTIES: dict[str, Any] = {
    "activeJobAndJobScheduleQuota": 100,
    "dedicatedCoreQuota": 500,
    "dedicatedCoreQuotaPerVMFamily": [
        {"name": "standardDSv5Family", "coreQuota": 100},
        {"name": "standardNCASv3_T4Family", "coreQuota": 64},
        {"name": "standardNCADSA100v4Family", "coreQuota": 0},
    ],
    "dedicatedCoreQuotaPerVMFamilyEnforced": True,
    "lowPriorityCoreQuota": 32,
    "poolAllocationMode": "BatchService",
    "poolQuota": 20,
    "provisioningState": "Succeeded",
    "publicNetworkAccess": "Enabled",
}


class FakeBatchArm(FakeArm):
    """The fake ARM with Batch accounts (``batch_accounts``: lower-case name → REST JSON)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_accounts: dict[str, dict[str, Any]] = {}
        self.account_properties: dict[str, Any] = copy.deepcopy(DEFAULT_ACCOUNT_PROPERTIES)

    def _route(self, method: str, path: str, query: dict[str, str], data: Any) -> Reply:
        m = re.match(
            r"^/subscriptions/[^/]+/resourceGroups/([^/]+)/providers/Microsoft\.Batch/batchAccounts/([^/]+)$",
            path,
            re.I,
        )
        if not m:
            return super()._route(method, path, query, data)
        name = m.group(2).lower()
        if method == "GET":
            if name not in self.batch_accounts:
                return self._error(404, "ResourceNotFound", f"The Resource '{path}' was not found.")
            account = copy.deepcopy(self.batch_accounts[name])
            account["properties"].update(copy.deepcopy(self.account_properties))
            return self._json(200, account)
        if method == "PUT":
            account = {
                "id": path,
                "name": name,
                "type": "Microsoft.Batch/batchAccounts",
                "location": data["location"],
                "tags": data.get("tags") or {},
                "identity": {"type": "None"},
                "properties": {
                    "accountEndpoint": f"{name}.{data['location']}.batch.azure.com",
                    "autoStorage": {
                        "storageAccountId": data["properties"]["autoStorage"]["storageAccountId"],
                        "lastKeySync": now(),
                    },
                    "poolAllocationMode": data["properties"].get("poolAllocationMode", "BatchService"),
                    **copy.deepcopy(self.account_properties),
                },
            }
            self.batch_accounts[name] = account
            return self._json(200, account)
        if method == "DELETE":
            self.batch_accounts.pop(name, None)
            return 200, {}, ""
        raise KeyError(path)


@dataclass
class FakeBatchService:
    """The data plane of one Batch account. ``addresses(pool, i)`` gives node ``i``'s ``ipAddress``."""

    account: str = "batchaitest"
    region: str = "eastus"
    addresses: Callable[[str, int], str] = lambda pool, i: f"10.0.0.{4 + i}"
    # How ranged reads are answered: "spec" (``Tasks_GetTaskFile``: 200 with the bytes ``ocp-range`` asks
    # for), "206" (a front that honours ``Range`` with 206 Partial Content), "whole" (one that ignores
    # the range: 200 and the whole file)
    ranges: str = "spec"
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    subtasks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[tuple[str, str, str], bytes] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[tuple[str, str, Any]] = field(default_factory=list)
    range_headers: list[dict[str, str]] = field(default_factory=list)
    auth_headers: list[str | None] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)
    # every body an operation of the spec excerpt received: (method, path, definition, errors)
    checked_bodies: list[tuple[str, str, str, list[str]]] = field(default_factory=list)
    validate: bool = MEASURE is None  # False: take invalid bodies as the service might (measuring only)
    on_task_added: Callable[[str, dict[str, Any]], None] | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def host(self) -> str:
        return f"{self.account}.{self.region}.batch.azure.com"

    def register(self, mock: responses.RequestsMock) -> None:
        pattern = re.compile(rf"https://{re.escape(self.host)}/.*")
        for method in ("GET", "PUT", "PATCH", "DELETE", "POST", "HEAD"):
            mock.add_callback(method, pattern, callback=self._handle)

    def inject(self, method: str, path_regex: str, status: int, code: str, message: str) -> None:
        self.injected.append(Injected(method, re.compile(path_regex), batch_error(status, code, message)))

    def count(self, method: str, path_regex: str) -> int:
        rx = re.compile(path_regex)
        return sum(1 for m, p in self.calls if m == method and rx.search(p))

    def body_of(self, method: str, path_regex: str) -> Any:
        rx = re.compile(path_regex)
        found = [b for m, p, b in self.bodies if m == method and rx.search(p)]
        assert found, f"no {method} {path_regex} was sent"
        return found[-1]

    # -- state changes made by tests ------------------------------------------------------------------
    def set_node(self, pool: str, index: int, **fields: Any) -> None:
        with self._lock:
            self.nodes[pool][index].update(fields)

    def set_task(self, job: str, task: str = "job", **fields: Any) -> None:
        with self._lock:
            entry = self.tasks[job][task]
            info = fields.pop("executionInfo", None)
            if "state" in fields and fields["state"] != entry.get("state"):  # as the service keeps them
                entry["previousState"] = entry.get("state")
                entry["previousStateTransitionTime"] = entry.get("stateTransitionTime")
            entry.update(fields)
            if info is not None:
                entry["executionInfo"] = {**entry.get("executionInfo", {}), **info}
            entry["stateTransitionTime"] = now()
            self._end_if_all_complete(job)

    @property
    def invalid_bodies(self) -> list[tuple[str, str, str, list[str]]]:
        return [c for c in self.checked_bodies if c[3]]

    def job_ids(self) -> list[str]:
        return list(self.jobs)

    # -- plumbing --------------------------------------------------------------------------------------
    def _handle(self, request: Any) -> Reply:
        seen = read_request(request, unquote_path=True)
        path, query, data = seen.path, seen.query, seen.data
        with self._lock:
            self.calls.append((request.method, path))
            self.bodies.append((request.method, path, data))
            self.auth_headers.append(request.headers.get("Authorization"))
            if "api-version" not in query:
                return batch_error(400, "MissingRequiredQueryParameter", "api-version is missing")
            injected = take_injected(self.injected, seen)
            if injected is not None:
                return injected
            if not str(request.headers.get("Authorization", "")).startswith("Bearer "):
                return batch_error(401, "AuthenticationFailed", "Server failed to authenticate the request.")
            checked = SPEC_BODIES.errors(request.method, path, data)
            if checked is not None:
                self.checked_bodies.append((request.method, path, *checked))
                if MEASURE:
                    with open(MEASURE, "a") as out:
                        out.write(json.dumps({"definition": checked[0], "errors": checked[1]}) + "\n")
                if checked[1] and self.validate:
                    return batch_error(
                        400,
                        "InvalidRequestBody",
                        f"The specified Request Body is not syntactically valid ({checked[0]}: "
                        + "; ".join(checked[1])
                        + ")",
                    )
            try:
                return self._route(request, path, query, data)
            except KeyError as exc:
                return batch_error(404, str(exc.args[0]) if exc.args else "NotFound", f"{path} not found")

    def _json(self, status: int, body: Any) -> Reply:
        return status, {"Content-Type": "application/json;odata=minimalmetadata"}, json.dumps(body)

    def _accepted(self, status: int = 202) -> Reply:
        return status, {"ETag": "0x8D45765A6A2DC04", "Last-Modified": formatdate(usegmt=True)}, ""

    def _route(self, request: Any, path: str, query: dict[str, str], data: Any) -> Reply:
        method = request.method
        parts = [p for p in path.split("/") if p]
        if parts[0] == "pools":
            return self._pools(method, parts[1:], data)
        if parts[0] == "jobs":
            return self._jobs(request, method, parts[1:], query, data)
        raise KeyError("InvalidUri")

    # -- pools -----------------------------------------------------------------------------------------
    def _grow(self, pool_id: str) -> None:
        pool = self.pools[pool_id]
        spot = int(pool.get("targetLowPriorityNodes") or 0)
        target = int(pool.get("targetDedicatedNodes") or 0) + spot
        nodes = self.nodes.setdefault(pool_id, [])
        live = [n for n in nodes if n["state"] not in ("leavingpool",)]
        while len(live) < target:
            i = len(nodes)
            node_id = f"tvm-1695681911_{i + 1}-20161122t193202z"
            node = example("Nodes_ListNodes", 0)  # Nodes_ListNodes' node, ours: id, address, size, state
            node.update(
                id=node_id,
                url=f"https://{self.host}/pools/{pool_id}/nodes/{node_id}",
                stateTransitionTime=now(),
                allocationTime=now(),
                ipAddress=self.addresses(pool_id, i),
                affinityId=f"TVM:{node_id}",
                vmSize=pool["vmSize"],
                isDedicated=not spot,
            )
            node.pop("startTask", None)
            if pool.get("startTask"):
                node["startTask"] = copy.deepcopy(pool["startTask"])
            node["startTaskInfo"].update(startTime=now(), endTime=now())
            nodes.append(node)
            live.append(node)
        for node in live[target:]:
            node["state"] = "leavingpool"
        pool["currentDedicatedNodes"] = 0 if spot else target
        pool["currentLowPriorityNodes"] = target if spot else 0

    @staticmethod
    def _first_evaluation(pool: dict[str, Any]) -> None:
        """The service evaluates a formula when it is set, before it has any sample: this fake reads only
        what our formula gives then (``$wanted``'s no-sample branch, ``... : N;``) and its target."""
        formula = pool["autoScaleFormula"]
        wanted = re.search(r"^\$wanted = .* : (\d+);$", formula, re.M)
        count = int(wanted.group(1)) if wanted else 0
        spot = "$TargetLowPriorityNodes = max" in formula
        pool.update(targetDedicatedNodes=0 if spot else count, targetLowPriorityNodes=count if spot else 0)

    def _pools(self, method: str, rest: list[str], data: Any) -> Reply:
        if not rest:
            if method == "POST":
                if data["id"] in self.pools:
                    return batch_error(409, "PoolExists", "The specified pool already exists.")
                pool = copy.deepcopy(data)
                for entry in pool.get("mountConfiguration") or ():
                    for conf in entry.values():
                        conf.pop("accountKey", None)  # the service never returns keys
                pool.pop("userAccounts", None)
                pool.update(
                    url=f"https://{self.host}/pools/{data['id']}",
                    eTag="0x8D4123BEF87D233",
                    creationTime=now(),
                    state="active",
                    allocationState="steady",
                )
                if pool.get("enableAutoScale"):
                    self._first_evaluation(pool)
                self.pools[data["id"]] = pool
                self._grow(data["id"])
                return self._accepted(201)
            if method == "GET":
                return self._json(200, {"value": list(self.pools.values())})
        pool_id = rest[0]
        if pool_id not in self.pools:
            raise KeyError("PoolNotFound")
        pool = self.pools[pool_id]
        if len(rest) == 1:
            if method == "GET":
                return self._json(200, pool)
            if method == "DELETE":
                del self.pools[pool_id]
                self.nodes.pop(pool_id, None)
                return self._accepted()
        action = rest[1]
        if action == "nodes" and method == "GET":
            return self._json(200, {"value": self.nodes.get(pool_id, [])})
        if action == "resize" and method == "POST":
            if pool.get("enableAutoScale"):
                return batch_error(
                    409, "AutoScalingEnabled", "The specified pool has automatic scaling enabled."
                )
            pool.update(
                targetDedicatedNodes=data.get("targetDedicatedNodes", 0),
                targetLowPriorityNodes=data.get("targetLowPriorityNodes", 0),
            )
            self._grow(pool_id)
            return self._accepted()
        if action == "disableautoscale" and method == "POST":
            pool["enableAutoScale"] = False
            pool.pop("autoScaleFormula", None)
            return self._accepted(200)
        if action == "enableautoscale" and method == "POST":
            pool.update(enableAutoScale=True, autoScaleFormula=data["autoScaleFormula"])
            pool["autoScaleEvaluationInterval"] = data.get("autoScaleEvaluationInterval", "PT15M")
            self._first_evaluation(pool)
            self._grow(pool_id)
            return self._accepted(200)
        raise KeyError("InvalidUri")

    # -- jobs and tasks --------------------------------------------------------------------------------
    def _jobs(self, request: Any, method: str, rest: list[str], query: dict[str, str], data: Any) -> Reply:
        if not rest:
            if method == "POST":
                if data["id"].lower() in {j.lower() for j in self.jobs}:
                    return batch_error(409, "JobExists", "The specified job already exists.")
                if data["poolInfo"]["poolId"] not in self.pools:
                    pass  # Batch accepts a job for a pool that does not exist yet
                job = example("Jobs_GetJob")  # its answer's shape; the request's properties; active
                for key in ("previousState", "previousStateTransitionTime", "constraints"):
                    job.pop(key)
                job.update(copy.deepcopy(data))
                job.update(
                    state="active",
                    creationTime=now(),
                    lastModified=now(),
                    stateTransitionTime=now(),
                    url=f"https://{self.host}/jobs/{data['id']}",
                    executionInfo={"startTime": now(), "poolId": data["poolInfo"].get("poolId")},
                )
                job.setdefault("onAllTasksComplete", "noaction")
                self.jobs[data["id"]] = job
                self.tasks[data["id"]] = {}
                self._end_if_all_complete(data["id"])
                return self._accepted(201)
            if method == "GET":
                wanted = "active" if "state eq 'active'" in query.get("$filter", "") else None
                found = [j for j in self.jobs.values() if wanted is None or j["state"] == wanted]
                return self._json(200, {"value": found})
        job_id = rest[0]
        if job_id not in self.jobs:
            raise KeyError("JobNotFound")
        job = self.jobs[job_id]
        if len(rest) == 1:
            if method == "GET":
                return self._json(200, job)
            if method == "PATCH":  # Jobs_UpdateJob: the given properties only
                if job["state"] != "active":
                    return batch_error(
                        409, "JobCompleted", "The specified job is already in a completed state."
                    )
                job.update(copy.deepcopy(data))
                self._end_if_all_complete(job_id)
                return 200, {"ETag": "0x8D45765A6A2DC04", "Last-Modified": formatdate(usegmt=True)}, ""
            if method == "DELETE":
                del self.jobs[job_id]
                self.tasks.pop(job_id, None)
                return self._accepted()
        if rest[1] == "terminate" and method == "POST":
            if job["state"] == "completed":
                return batch_error(409, "JobCompleted", "The specified job is already in a completed state.")
            job["state"] = "completed"
            job["executionInfo"] = {"terminateReason": (data or {}).get("terminateReason")}
            for task in self.tasks[job_id].values():
                if task["state"] != "completed":
                    task["state"] = "completed"
                    task.setdefault("executionInfo", {}).update(
                        result="failure",
                        endTime=now(),
                        failureInfo={
                            "category": "usererror",
                            "code": "TaskEnded",
                            "message": "Task Was Ended by User Request",
                        },
                    )
            return self._accepted()
        if rest[1] == "tasks":
            return self._tasks(request, method, job_id, rest[2:], data)
        raise KeyError("InvalidUri")

    def _end_if_all_complete(self, job_id: str) -> None:
        """``onAllTasksComplete: terminatejob``: the job ends once every task has completed; a job with no
        task counts as complete (the spec's note: set it after adding the tasks)."""
        job = self.jobs.get(job_id)
        if job is None or job["state"] != "active" or job.get("onAllTasksComplete") != "terminatejob":
            return
        if all(t["state"] == "completed" for t in self.tasks.get(job_id, {}).values()):
            job["state"] = "completed"
            job["executionInfo"] = {"terminateReason": "AllTasksComplete", "endTime": now()}

    def _tasks(self, request: Any, method: str, job_id: str, rest: list[str], data: Any) -> Reply:
        tasks = self.tasks[job_id]
        if not rest:
            if method == "POST":
                if self.jobs[job_id]["state"] != "active":
                    return batch_error(
                        409, "JobCompleted", "The specified job is already in a completed state."
                    )
                if data["id"] in tasks:
                    return batch_error(409, "TaskExists", "The specified task already exists.")
                task = example("Tasks_ListTasks", 0)  # its shape; the request's properties; active
                task.pop("userIdentity")  # the example's auto-user: the task runs as the request says
                task.update(copy.deepcopy(data))
                task.update(
                    url=f"https://{self.host}/jobs/{job_id}/tasks/{data['id']}",
                    creationTime=now(),
                    lastModified=now(),
                    stateTransitionTime=now(),
                    executionInfo={"retryCount": 0, "requeueCount": 0},
                )
                task["requiredSlots"] = data.get("requiredSlots", 1)
                tasks[data["id"]] = task
                if self.on_task_added is not None:
                    self.on_task_added(job_id, task)
                return self._accepted(201)
            if method == "GET":
                return self._json(200, {"value": list(tasks.values())})
        task_id = rest[0]
        if task_id not in tasks:
            raise KeyError("TaskNotFound")
        if len(rest) == 1 and method == "GET":
            return self._json(200, tasks[task_id])
        if rest[1] == "subtasksinfo" and method == "GET":
            return self._json(200, {"value": self.subtasks.get(job_id, [])})
        if rest[1] == "files" and len(rest) == 2 and method == "GET":  # Tasks_ListTaskFiles
            listing = []
            for (j, t, name), data in self.files.items():
                if (j, t) != (job_id, task_id):
                    continue
                entry = example("Tasks_ListTaskFiles", 0)
                entry.update(name=name, url=f"https://{self.host}/jobs/{job_id}/tasks/{task_id}/files/{name}")
                entry["properties"].update(
                    creationTime=now(), lastModified=now(), contentLength=str(len(data))
                )
                listing.append(entry)
            return self._json(200, {"value": listing})
        if rest[1] == "files" and len(rest) > 2:
            return self._file(request, method, job_id, task_id, "/".join(rest[2:]))
        raise KeyError("InvalidUri")

    def _file(self, request: Any, method: str, job_id: str, task_id: str, name: str) -> Reply:
        data = self.files.get((job_id, task_id, name))
        if data is None:
            raise KeyError("FileNotFound")
        headers = {
            **example_headers("Tasks_GetTaskFile"),
            "ocp-creation-time": formatdate(usegmt=True),
            "Last-Modified": formatdate(usegmt=True),
            "ocp-batch-file-isdirectory": "false",
            "ocp-batch-file-url": f"https://{self.host}/jobs/{job_id}/tasks/{task_id}/files/{name}",
            "ocp-batch-file-mode": "0o100644",
            "Content-Type": "application/octet-stream",
        }
        if method == "HEAD":
            return 200, {**headers, "Content-Length": str(len(data))}, b""
        self.range_headers.append(
            {k: v for k, v in request.headers.items() if k.lower() in ("range", "ocp-range")}
        )
        wanted = request.headers.get("ocp-range")
        if self.ranges == "206":
            wanted = request.headers.get("Range") or wanted
        if wanted and self.ranges in ("spec", "206"):
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted)
            assert m, wanted
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
            if start >= len(data):
                return 416, {"Content-Range": f"bytes */{len(data)}"}, b""
            part = data[start : end + 1]
            if self.ranges == "spec":
                return 200, {**headers, "Content-Length": str(len(part))}, part
            return (
                206,
                {
                    **headers,
                    "Content-Range": f"bytes {start}-{end}/{len(data)}",
                    "Content-Length": str(len(part)),
                },
                part,
            )
        return 200, {**headers, "Content-Length": str(len(data))}, data
