"""A stateful fake of the ARM endpoints batchai_sdk calls, served through ``responses`` to the real
azure-mgmt-* clients.

Every request body of an operation listed in ``tests/data/arm_spec`` (resource groups, storage accounts,
NSG, VNet, scale set PUT/PATCH/delete instances/run command, role assignments, Batch accounts) is checked
against its definitions (jsonschema; an undeclared or read-only property is refused with ``400
InvalidRequestContent`` naming it; ``checked_bodies``/``invalid_bodies`` keep them). ``listKeys`` and a
role assignment's creation answer with the official ``x-ms-examples`` responses
(``tests/data/arm_spec/examples``), ids and the request's own properties adapted; the other payloads
follow the shape of the azure-rest-api-specs examples (``VirtualMachineScaleSetVM_List``,
``RunCommand``, ...). Long-running operations answer the way the services do: network and compute PUTs with ``201`` + ``Azure-AsyncOperation``, deletes and storage creation with ``202`` +
``Location`` (polled until ``200``), each staying ``InProgress`` for ``op_polls`` polls. Scale-set
instances start ``Creating`` with their node setup extension ``transitioning`` and become ready after
``instance_delay`` listings. ``inject()`` queues canned answers (429, quota errors, ...) for matching calls.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import responses
from spec_bodies import SpecBodies

Reply = tuple[int, dict[str, str], str]
# Measuring (the count): each body a PUT/PATCH/POST carried is appended to this file, and
# invalid bodies are taken as the service might (not refused)
MEASURE = os.environ.get("BATCHAI_FAKE_ARM_BODIES")
# Each check (method, path, definition, errors) is appended to this file, invalid bodies still refused
CHECKED = os.environ.get("BATCHAI_FAKE_ARM_CHECKED")
SPEC = Path(__file__).resolve().parents[1] / "data" / "arm_spec" / "definitions.json"
ARM_SPEC_BODIES = SpecBodies(SPEC, ignore_case=True, separator=".")
EXAMPLES = SPEC.parent / "examples"


def example(operation: str, status: str = "200") -> Any:
    """The response body of an official ``x-ms-examples`` file (``tests/data/arm_spec/examples``), a fresh
    copy: the fake adapts only its ids and what the request itself set."""
    return copy.deepcopy(
        json.loads((EXAMPLES / f"{operation}.json").read_text())["responses"][status]["body"]
    )


SETUP_EXTENSION = "batchai-node-setup"


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class Operation:
    id: str
    polls_left: int
    on_done: Callable[[], Any] | None = None  # returns the final body (Location style) or None
    error: dict[str, Any] | None = None
    status: str = "InProgress"
    result: Any = None


@dataclass
class Injected:
    """A canned reply for the next ``times`` calls of ``method`` whose path matches ``pattern``."""

    method: str
    pattern: re.Pattern[str]
    reply: Reply
    times: int = 1


@dataclass
class Seen:
    """One request as the fakes read it: the path without its trailing slash, the query and the JSON body."""

    method: str
    path: str
    query: dict[str, str]
    data: Any


def read_request(request: Any, *, unquote_path: bool = False) -> Seen:
    url = urlsplit(request.url)
    path = url.path.rstrip("/")
    body = request.body
    if isinstance(body, bytes):
        body = body.decode()
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    return Seen(
        request.method, unquote(path) if unquote_path else path, query, json.loads(body) if body else None
    )


def take_injected(injected: list[Injected], seen: Seen) -> Reply | None:
    """The canned reply queued for this request, if any (used up after its ``times``)."""
    for inj in list(injected):
        if inj.method == seen.method and inj.pattern.search(seen.path):
            inj.times -= 1
            if inj.times <= 0:
                injected.remove(inj)
            return inj.reply
    return None


@dataclass
class Instance:
    instance_id: str
    vm_id: str
    computer_name: str
    private_ip: str
    public_ip: str
    lists_until_ready: int
    state: str = "Creating"  # VM provisioningState
    power: str = "starting"
    setup: str = "transitioning"  # node setup extension: transitioning / succeeded / failed
    setup_message: str = ""
    agent_ready: bool = True
    host_key: str = ""


class FakeArm:
    def __init__(
        self,
        subscription_id: str,
        *,
        base_url: str = "https://management.azure.com",
        page_size: int = 2,
        op_polls: int = 1,
        instance_delay: int = 1,
        addresses: Callable[[str, int], tuple[str, str]] | None = None,
        host_keys: Callable[[str, int], str] | None = None,
        on_instance_created: Callable[[dict[str, Any], Instance], None] | None = None,
    ) -> None:
        self.sub = subscription_id
        self.base = base_url.rstrip("/")
        self.page_size = page_size
        self.op_polls = op_polls
        self.instance_delay = instance_delay
        self.addresses = addresses or (lambda vmss, i: (f"10.0.0.{4 + i}", f"20.0.{i // 250}.{1 + i % 250}"))
        self.host_keys = host_keys  # (vmss, instance index) → host public key; default: one per VM
        self.on_instance_created = on_instance_created
        self.groups: dict[str, dict[str, Any]] = {}
        self.resources: dict[str, dict[str, Any]] = {}  # lower-case id → REST JSON
        self.instances: dict[str, dict[str, Instance]] = {}  # lower-case vmss id → instance id → Instance
        self.ops: dict[str, Operation] = {}
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, Any]] = []
        self.auth_headers: list[str | None] = []
        self.queries: list[dict[str, str]] = []  # each call's query parameters ($filter, $expand, ...)
        self.injected: list[Injected] = []
        self.storage_keys = ["c3RvcmFnZS1rZXktMS1zZWNyZXQ=", "c3RvcmFnZS1rZXktMi1zZWNyZXQ="]
        self.role_assignments: dict[str, dict[str, Any]] = {}  # lower-case id → REST JSON
        self.accepted_tokens: set[str] | None = None  # None: any bearer token; else only these
        self.imds_token = "eyJ0eXAiOiJKV1QifQ.eyJvaWQiOiJ2bXNzLWlkZW50aXR5In0.aW1kcy1zaWduYXR1cmU"
        self.imds_calls: list[dict[str, str]] = []
        self.skus: list[dict[str, Any]] = [copy.deepcopy(s) for s in DEFAULT_SKUS]  # Resource SKUs
        self.usages: dict[str, list[dict[str, Any]]] = {"eastus": copy.deepcopy(DEFAULT_USAGES)}
        self.created: dict[str, str] = {}  # lower-case id → createdTime (what $expand=createdTime gives)
        self.evicted: list[tuple[str, str]] = []  # (scale set id, instance id) of simulateEviction calls
        # every body an operation of tests/data/arm_spec received: (method, path, definition, errors)
        self.checked_bodies: list[tuple[str, str, str, list[str]]] = []
        self.validate = MEASURE is None  # False: take invalid bodies as the service might (measuring)
        self._httpd: Any = None
        self._lock = threading.RLock()
        self._next_instance: dict[str, itertools.count[int]] = {}

    # -- wiring ------------------------------------------------------------------------------------------
    def register(self, mock: responses.RequestsMock) -> None:
        pattern = re.compile(re.escape(self.base) + r"/.*")
        for method in ("GET", "PUT", "PATCH", "DELETE", "POST", "HEAD"):
            mock.add_callback(method, pattern, callback=self._handle)

    def inject(
        self,
        method: str,
        path_regex: str,
        status: int,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` whose path matches ``path_regex`` with this."""
        text = body if isinstance(body, str) else json.dumps(body) if body else ""
        reply = (status, {"Content-Type": "application/json", **(headers or {})}, text)
        self.injected.append(Injected(method, re.compile(path_regex, re.I), reply, times))

    def count(self, method: str, path_regex: str) -> int:
        rx = re.compile(path_regex, re.I)
        return sum(1 for m, p in self.calls if m == method and rx.search(p))

    @property
    def invalid_bodies(self) -> list[tuple[str, str, str, list[str]]]:
        return [c for c in self.checked_bodies if c[3]]

    def rg_id(self, rg: str) -> str:
        return f"/subscriptions/{self.sub}/resourceGroups/{rg}"

    # -- test controls -------------------------------------------------------------------------------------
    def instance(self, vmss: str, instance_id: str) -> Instance:
        for key, insts in self.instances.items():
            if key.endswith("/virtualmachinescalesets/" + vmss.lower()) and instance_id in insts:
                return insts[instance_id]
        raise KeyError(f"{vmss}/{instance_id}")

    def make_ready(self) -> None:
        with self._lock:
            for insts in self.instances.values():
                for inst in insts.values():
                    inst.lists_until_ready = 0
                    self._advance(inst)

    # -- plumbing ------------------------------------------------------------------------------------------
    def _handle(self, request: Any) -> Reply:
        seen = read_request(request)
        path, query, data = seen.path, seen.query, seen.data
        with self._lock:
            self.calls.append((request.method, path))
            self.bodies.append((request.method, path, data))
            if MEASURE and request.method in ("PUT", "PATCH", "POST"):
                with open(MEASURE, "a") as out:
                    out.write(json.dumps([request.method, path, query.get("api-version"), data]) + "\n")
            self.auth_headers.append(request.headers.get("Authorization"))
            self.queries.append(query)
            injected = take_injected(self.injected, seen)
            if injected is not None:
                return injected
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer "):
                return self._error(
                    401, "AuthenticationFailed", "Authentication failed. The Authorization header is missing."
                )
            if self.accepted_tokens is not None and auth[len("Bearer ") :] not in self.accepted_tokens:
                return self._error(401, "InvalidAuthenticationToken", "The access token is invalid.")
            checked = ARM_SPEC_BODIES.errors(request.method, path, data)
            if checked is not None:
                definition, problems = checked
                self.checked_bodies.append((request.method, path, definition, problems))
                if MEASURE or CHECKED:
                    with open(CHECKED or f"{MEASURE}.checked", "a") as out:
                        out.write(json.dumps([request.method, path, definition, problems]) + "\n")
                if problems and self.validate:
                    return self._error(
                        400,
                        "InvalidRequestContent",
                        f"The request content was invalid ({definition}): {'; '.join(problems)}",
                    )
            try:
                return self._route(request.method, path, query, data)
            except KeyError:
                return self._error(404, "ResourceNotFound", f"The Resource '{path}' was not found.")
            finally:
                if request.method == "PUT":
                    for key in list(self.resources) + [self.rg_id(g) for g in self.groups]:
                        self.created.setdefault(key.lower(), now())

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
        return (
            status,
            {"Content-Type": "application/json; charset=utf-8", **(headers or {})},
            json.dumps(body),
        )

    def _error(self, status: int, code: str, message: str) -> Reply:
        return self._json(status, {"error": {"code": code, "message": message}})

    def _new_op(
        self,
        namespace: str,
        location: str,
        on_done: Callable[[], Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> tuple[str, str]:
        op = Operation(str(uuid.uuid4()), self.op_polls, on_done, error)
        self.ops[op.id] = op
        root = f"{self.base}/subscriptions/{self.sub}/providers/{namespace}/locations/{location}"
        return (
            f"{root}/operations/{op.id}?api-version=2024-03-01",
            f"{root}/operationResults/{op.id}?api-version=2024-03-01",
        )

    def _poll(self, op_id: str) -> Operation:
        op = self.ops[op_id]
        if op.status == "InProgress":
            if op.polls_left > 0:
                op.polls_left -= 1
            else:
                if op.error is not None:
                    op.status = "Failed"
                else:
                    op.status = "Succeeded"
                    op.result = op.on_done() if op.on_done else None
        return op

    def _route(self, method: str, path: str, query: dict[str, str], data: Any) -> Reply:
        low = path.lower()
        m = re.match(
            r"^/subscriptions/[^/]+/providers/[^/]+/locations/[^/]+/(operations|operationresults)/([^/]+)$",
            low,
        )
        if m:
            op = self._poll(self.ops_key(m.group(2)))
            if m.group(1) == "operations":
                body: dict[str, Any] = {"name": op.id, "status": op.status, "startTime": now()}
                if op.status == "Failed":
                    body["error"] = op.error
                if op.status != "InProgress":
                    body["endTime"] = now()
                return self._json(200, body)
            if op.status == "InProgress":
                return 202, {"Location": f"{self.base}{path}?api-version=2024-03-01"}, ""
            if op.status == "Failed":
                return self._json(400, {"error": op.error})
            return (
                (200, {"Content-Type": "application/json"}, json.dumps(op.result))
                if op.result is not None
                else (204, {}, "")
            )
        if "/providers/microsoft.authorization/roleassignments/" in low:
            return self._role_assignment(method, path, data)
        sub_root = f"/subscriptions/{self.sub}".lower()
        if low == sub_root + "/providers/microsoft.compute/skus" and method == "GET":
            return self._list_skus(query)
        m = re.match(re.escape(sub_root) + r"/providers/microsoft\.compute/locations/([^/]+)/usages$", low)
        if m and method == "GET":
            return self._list_usages(m.group(1), query)
        if low == sub_root + "/resources" and method == "GET":
            return self._list_resources(query)
        if low == sub_root + "/resourcegroups" and method == "GET":
            return self._list_groups(query)
        m = re.match(r"^/subscriptions/[^/]+/resourcegroups/([^/]+)(/.*)?$", low)
        if not m:
            return self._error(404, "InvalidResourceType", "not faked")
        rg = path.split("/")[4]
        rest = m.group(2) or ""
        if not rest:
            return self._group(method, rg, data)
        if rg.lower() not in self.groups:
            return self._error(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        parts = path.split("/")[5:]  # providers/<ns>/<type>/<name>/...
        ns = parts[1].lower()
        if ns == "microsoft.storage":
            return self._storage(method, rg, parts, data)
        if ns == "microsoft.network":
            return self._network(method, rg, parts, data)
        if ns == "microsoft.compute":
            return self._compute(method, rg, parts, query, data)
        return self._error(404, "InvalidResourceNamespace", ns)

    def ops_key(self, op_id: str) -> str:
        for key in self.ops:
            if key.lower() == op_id:
                return key
        raise KeyError(op_id)

    # -- resource groups ----------------------------------------------------------------------------------
    def _group(self, method: str, rg: str, data: Any) -> Reply:
        key = rg.lower()
        if method == "GET" or method == "HEAD":
            group = self.groups.get(key)
            if group is None:
                return self._error(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
            return self._json(200, group)
        if method == "PUT":
            existed = key in self.groups
            group = {
                "id": self.rg_id(rg),
                "name": rg,
                "type": "Microsoft.Resources/resourceGroups",
                "location": data["location"],
                "tags": data.get("tags") or {},
                "properties": {"provisioningState": "Succeeded"},
            }
            self.groups[key] = group
            return self._json(200 if existed else 201, group)
        if method == "DELETE":
            if key not in self.groups:
                return self._error(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")

            def done() -> None:
                self.groups.pop(key, None)
                prefix = self.rg_id(rg).lower() + "/"
                for rid in [r for r in self.resources if r.startswith(prefix)]:
                    del self.resources[rid]
                for vid in [v for v in self.instances if v.startswith(prefix)]:
                    del self.instances[vid]

            _, location = self._new_op("Microsoft.Resources", "eastus", done)
            return 202, {"Location": location, "Retry-After": "0"}, ""
        return self._error(405, "MethodNotAllowed", method)

    # -- storage -------------------------------------------------------------------------------------------
    def _storage(self, method: str, rg: str, parts: list[str], data: Any) -> Reply:
        name = parts[3]
        rid = f"{self.rg_id(rg)}/providers/Microsoft.Storage/storageAccounts/{name}"
        key = rid.lower()
        if len(parts) == 5 and parts[4].lower() == "listkeys" and method == "POST":
            if key not in self.resources:
                raise KeyError(key)
            listed = example("StorageAccountListKeys")
            for entry, value in zip(listed["keys"], self.storage_keys, strict=True):
                entry["value"] = value
            return self._json(200, listed)
        if method == "GET":
            return self._json(200, self.resources[key])
        if method == "PUT":
            resource = {
                "id": rid,
                "name": name,
                "type": "Microsoft.Storage/storageAccounts",
                "location": data["location"],
                "tags": data.get("tags") or {},
                "sku": data["sku"],
                "kind": data["kind"],
                "properties": {
                    **data.get("properties", {}),
                    "provisioningState": "Succeeded",
                    "primaryEndpoints": {"file": f"https://{name}.file.core.windows.net/"},
                },
            }

            def done() -> dict[str, Any]:
                self.resources[key] = resource
                return resource

            _, location = self._new_op("Microsoft.Storage", data["location"], done)
            return 202, {"Location": location, "Retry-After": "0"}, ""
        if method == "DELETE":
            if self.resources.pop(key, None) is None:
                return 204, {}, ""
            return 200, {}, ""
        return self._error(405, "MethodNotAllowed", method)

    # -- network -------------------------------------------------------------------------------------------
    def _network(self, method: str, rg: str, parts: list[str], data: Any) -> Reply:
        kind, name = parts[2], parts[3]
        canonical = {"networksecuritygroups": "networkSecurityGroups", "virtualnetworks": "virtualNetworks"}[
            kind.lower()
        ]
        rid = f"{self.rg_id(rg)}/providers/Microsoft.Network/{canonical}/{name}"
        key = rid.lower()
        if method == "GET":
            return self._json(200, self.resources[key])
        if method == "PUT":
            resource = copy.deepcopy(data)
            resource.update(
                id=rid, name=name, type=f"Microsoft.Network/{canonical}", etag=f'W/"{uuid.uuid4()}"'
            )
            props = resource.setdefault("properties", {})
            props["provisioningState"] = "Updating"
            for sub in props.get("subnets", []) + props.get("securityRules", []):
                sub["id"] = (
                    f"{rid}/{'subnets' if 'addressPrefix' in sub.get('properties', {}) else 'securityRules'}/{sub['name']}"
                )
                sub.setdefault("properties", {})["provisioningState"] = "Succeeded"
            existed = key in self.resources
            self.resources[key] = resource

            def done() -> None:
                props["provisioningState"] = "Succeeded"

            async_op, _ = self._new_op("Microsoft.Network", data.get("location", "eastus"), done)
            return self._json(
                200 if existed else 201, resource, {"Azure-AsyncOperation": async_op, "Retry-After": "0"}
            )
        if method == "DELETE":
            if key not in self.resources:
                return 204, {}, ""

            def gone() -> None:
                self.resources.pop(key, None)

            async_op, location = self._new_op("Microsoft.Network", "eastus", gone)
            return 202, {"Azure-AsyncOperation": async_op, "Location": location, "Retry-After": "0"}, ""
        return self._error(405, "MethodNotAllowed", method)

    # -- compute -------------------------------------------------------------------------------------------
    def _compute(self, method: str, rg: str, parts: list[str], query: dict[str, str], data: Any) -> Reply:
        vmss_root = f"{self.rg_id(rg)}/providers/Microsoft.Compute/virtualMachineScaleSets"
        if len(parts) == 3:  # list scale sets
            items = [r for k, r in self.resources.items() if k.startswith(vmss_root.lower() + "/")]
            return self._json(200, {"value": [self._vmss_view(r) for r in items]})
        name = parts[3]
        rid = f"{vmss_root}/{name}"
        key = rid.lower()
        tail = [p.lower() for p in parts[4:]]
        if not tail:
            return self._vmss(method, rid, name, data)
        if key not in self.resources:
            raise KeyError(key)
        if tail == ["virtualmachines"] and method == "GET":
            return self._list_vms(rid, query)
        if tail == ["networkinterfaces"] and method == "GET":
            return self._json(200, {"value": [self._nic(rid, i) for i in self._live(key)]})
        if tail == ["publicipaddresses"] and method == "GET":
            return self._json(200, {"value": [self._pip(rid, i) for i in self._live(key)]})
        if tail == ["delete"] and method == "POST":
            return self._delete_instances(rid, data)
        if len(tail) == 3 and tail[0] == "virtualmachines" and tail[2] == "runcommand" and method == "POST":
            return self._run_command(rid, name, parts[5], data)
        if (
            len(tail) == 3
            and tail[0] == "virtualmachines"
            and tail[2] == "simulateeviction"
            and method == "POST"
        ):
            return self._simulate_eviction(rid, parts[5])
        return self._error(404, "NotFound", "/".join(tail))

    # -- subscription-level reads: Resource SKUs, usages, tagged resources -----------------------------------
    def _page(self, items: list[dict[str, Any]], path: str, query: dict[str, str]) -> Reply:
        """One page of ``items`` with a ``nextLink`` that keeps the query (ARM's paging)."""
        start = int(query.get("$skiptoken", "0"))
        body: dict[str, Any] = {"value": items[start : start + self.page_size]}
        if start + self.page_size < len(items):
            rest = "&".join(f"{k}={v}" for k, v in query.items() if k != "$skiptoken")
            body["nextLink"] = f"{self.base}{path}?{rest}&$skiptoken={start + self.page_size}"
        return self._json(200, body)

    def _list_skus(self, query: dict[str, str]) -> Reply:
        m = re.match(r"^location eq '([^']+)'$", query.get("$filter", ""))
        region = m.group(1).lower() if m else None
        items = [s for s in self.skus if region is None or region in [x.lower() for x in s["locations"]]]
        return self._page(items, f"/subscriptions/{self.sub}/providers/Microsoft.Compute/skus", query)

    def _list_usages(self, region: str, query: dict[str, str]) -> Reply:
        items = self.usages.get(region, [])
        path = f"/subscriptions/{self.sub}/providers/Microsoft.Compute/locations/{region}/usages"
        return self._page(items, path, query)

    @staticmethod
    def _tag_filter(text: str) -> tuple[str, str | None] | None:
        m = re.match(r"^tagName eq '([^']+)'(?: and tagValue eq '([^']*)')?$", text)
        return (m.group(1), m.group(2)) if m else None

    def _tagged(self, items: list[dict[str, Any]], query: dict[str, str]) -> list[dict[str, Any]] | None:
        """``items`` that match a tag ``$filter``; None for a filter this fake does not know."""
        if "$filter" not in query:
            return items
        tag = self._tag_filter(query["$filter"])
        if tag is None:
            return None
        name, value = tag
        return [
            r for r in items if name in (r.get("tags") or {}) and (value is None or r["tags"][name] == value)
        ]

    def _list_resources(self, query: dict[str, str]) -> Reply:
        """``GET /subscriptions/{id}/resources``: GenericResourceExpanded items. As ARM documents, a filter
        on a tag name *and value* returns the resources without their tags (and without $expand's extras)."""
        found = self._tagged([r for r in self.resources.values() if "type" in r], query)
        if found is None:
            return self._error(400, "InvalidFilterInQueryString", f"Invalid $filter '{query['$filter']}'.")
        by_value = " and tagValue eq " in query.get("$filter", "")
        expand = query.get("$expand", "").split(",")
        items = []
        for r in found:
            item = {k: r[k] for k in ("id", "name", "type", "location") if k in r}
            if "sku" in r:
                item["sku"] = {k: v for k, v in r["sku"].items() if k in ("name", "tier", "capacity")}
            if "kind" in r:
                item["kind"] = r["kind"]
            if not by_value:
                item["tags"] = dict(r.get("tags") or {})
                if "createdTime" in expand:
                    item["createdTime"] = self.created.get(r["id"].lower(), now())
                if "provisioningState" in expand:
                    item["provisioningState"] = (r.get("properties") or {}).get("provisioningState")
            items.append(item)
        return self._page(
            sorted(items, key=lambda i: i["id"].lower()), f"/subscriptions/{self.sub}/resources", query
        )

    def _list_groups(self, query: dict[str, str]) -> Reply:
        found = self._tagged(list(self.groups.values()), query)
        if found is None:
            return self._error(400, "InvalidFilterInQueryString", f"Invalid $filter '{query['$filter']}'.")
        return self._page(found, f"/subscriptions/{self.sub}/resourcegroups", query)

    def _simulate_eviction(self, rid: str, instance_id: str) -> Reply:
        """POST .../virtualMachines/{instanceId}/simulateEviction: 204; Spot VMs only. The VM is then
        evicted (policy Delete: it goes) — the fake marks it Deleting."""
        key = rid.lower()
        inst = self.instances.get(key, {}).get(instance_id)
        if inst is None:
            raise KeyError(instance_id)
        profile = self.resources[key]["properties"]["virtualMachineProfile"]
        if profile.get("priority") != "Spot":
            return self._error(
                409, "OperationNotAllowed", "Simulate eviction is only supported for Spot virtual machines."
            )
        self.evicted.append((rid, instance_id))
        inst.state = "Deleting"
        return 204, {}, ""

    def _live(self, key: str) -> list[Instance]:
        return list(self.instances.get(key, {}).values())

    def _vmss_view(self, resource: dict[str, Any]) -> dict[str, Any]:
        view = copy.deepcopy(resource)
        profile = view["properties"].get("virtualMachineProfile", {})
        for ext in profile.get("extensionProfile", {}).get("extensions", []):
            ext.get("properties", {}).pop("protectedSettings", None)  # never returned by ARM
        return view

    def _vmss(self, method: str, rid: str, name: str, data: Any) -> Reply:
        key = rid.lower()
        if method == "GET":
            resource = self.resources[key]
            return self._json(200, self._vmss_view(resource))
        if method == "PUT":
            existed = key in self.resources
            resource = copy.deepcopy(data)
            resource.update(id=rid, name=name, type="Microsoft.Compute/virtualMachineScaleSets")
            resource["properties"]["provisioningState"] = "Creating" if not existed else "Updating"
            resource["properties"]["uniqueId"] = str(uuid.uuid4())
            identity = resource.get("identity") or {}
            if "SystemAssigned" in str(identity.get("type", "")):
                old_identity = (self.resources.get(key) or {}).get("identity") or {}
                identity["principalId"] = old_identity.get("principalId") or str(uuid.uuid4())
                identity["tenantId"] = "72f988bf-86f1-41af-91ab-2d7cd011db47"
            self.resources[key] = resource
            self._set_capacity(rid, int(data["sku"]["capacity"]))
            async_op, _ = self._new_op("Microsoft.Compute", data["location"], lambda: self._settle(key))
            return self._json(
                200 if existed else 201,
                self._vmss_view(resource),
                {"Azure-AsyncOperation": async_op, "Retry-After": "0"},
            )
        if method == "PATCH":
            resource = self.resources[key]
            if (data.get("properties") or {}).get("singlePlacementGroup") is True and (
                resource["properties"].get("singlePlacementGroup") is False
            ):
                return self._error(
                    409,
                    "PropertyChangeNotAllowed",
                    "Changing property 'singlePlacementGroup' is not allowed.",
                )
            resource["properties"].update(data.get("properties") or {})
            if (
                "sku" in data
                and int(data["sku"].get("capacity", 0)) > 100
                and resource["properties"].get("singlePlacementGroup", True)
            ):
                return self._error(
                    400,
                    "InvalidParameter",
                    "The capacity of a scale set with singlePlacementGroup true cannot exceed 100.",
                )
            if "sku" in data:
                resource["sku"].update(data["sku"])
                self._set_capacity(rid, int(resource["sku"]["capacity"]))
            resource["properties"]["provisioningState"] = "Updating"
            async_op, _ = self._new_op("Microsoft.Compute", resource["location"], lambda: self._settle(key))
            return self._json(
                200, self._vmss_view(resource), {"Azure-AsyncOperation": async_op, "Retry-After": "0"}
            )
        if method == "DELETE":
            if key not in self.resources:
                return 204, {}, ""
            self.resources[key]["properties"]["provisioningState"] = "Deleting"
            for inst in self.instances.get(key, {}).values():
                inst.state = "Deleting"

            def gone() -> None:
                self.resources.pop(key, None)
                self.instances.pop(key, None)
                self._next_instance.pop(key, None)

            async_op, location = self._new_op("Microsoft.Compute", "eastus", gone)
            return 202, {"Azure-AsyncOperation": async_op, "Location": location, "Retry-After": "0"}, ""
        return self._error(405, "MethodNotAllowed", method)

    # -- role assignments (Microsoft.Authorization, 2022-04-01) ------------------------------------------------
    def _role_assignment(self, method: str, path: str, data: Any) -> Reply:
        scope, _, name = path.rpartition("/providers/Microsoft.Authorization/roleAssignments/")
        if not scope:
            low = path.lower()
            i = low.index("/providers/microsoft.authorization/roleassignments/")
            scope, name = path[:i], path.rsplit("/", 1)[1]
        rid = f"{scope}/providers/Microsoft.Authorization/roleAssignments/{name}"
        key = rid.lower()
        if method == "GET":
            return self._json(200, self.role_assignments[key])
        if method == "PUT":
            props = (data or {}).get("properties") or {}
            for field_name in ("roleDefinitionId", "principalId"):
                if not props.get(field_name):
                    return self._error(400, "InvalidRoleAssignmentRequest", f"{field_name} is required")
            if scope.lower() not in self.resources:
                return self._error(404, "ResourceNotFound", f"The Resource '{scope}' was not found.")
            principals = {
                str(((r.get("identity") or {}).get("principalId")) or "") for r in self.resources.values()
            }
            if props["principalId"] not in principals:
                return self._error(
                    400,
                    "PrincipalNotFound",
                    f"Principal {props['principalId']} does not exist in the directory.",
                )
            existing = self.role_assignments.get(key)
            if existing is not None:
                if existing["properties"]["principalId"] != props["principalId"]:
                    return self._error(
                        409,
                        "RoleAssignmentUpdateNotPermitted",
                        "Tenant ID, application ID, principal ID, and scope are not allowed to be updated.",
                    )
                return self._error(409, "RoleAssignmentExists", "The role assignment already exists.")
            for other in self.role_assignments.values():
                o = other["properties"]
                if (
                    o["scope"].lower() == scope.lower()
                    and o["principalId"] == props["principalId"]
                    and o["roleDefinitionId"].lower() == props["roleDefinitionId"].lower()
                ):
                    return self._error(409, "RoleAssignmentExists", "The role assignment already exists.")
            body = example("RoleAssignments_CreateForResource", "201")
            body.update(id=rid, name=name)
            body["properties"].update(
                {k: v for k, v in props.items() if k != "scope"}, scope=scope
            )  # the request's own properties (description included), the scope from its path
            self.role_assignments[key] = body
            return self._json(201, body)
        if method == "DELETE":
            gone = self.role_assignments.pop(key, None)
            return (204, {}, "") if gone is None else self._json(200, gone)
        return self._error(405, "MethodNotAllowed", method)

    # -- served over real HTTP (for the stdlib helpers that run on the nodes) -----------------------------
    def serve(self) -> str:
        """Serve this fake on 127.0.0.1 over HTTP (plus IMDS's token endpoint under ``/metadata/``);
        returns the base URL, which becomes ``self.base``. ``close()`` stops it."""
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self

        class _Request:
            def __init__(self, method: str, url: str, headers: dict[str, str], body: bytes) -> None:
                self.method, self.url, self.headers, self.body = method, url, headers, body

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith("/metadata/"):
                    status, headers, text = fake._imds(self.command, self.path, dict(self.headers.items()))
                else:
                    req = _Request(self.command, fake.base + self.path, dict(self.headers.items()), body)
                    status, headers, text = fake._handle(req)
                data = text.encode() if isinstance(text, str) else text
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _any

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self.base

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _imds(self, method: str, path: str, headers: dict[str, str]) -> Reply:
        """IMDS's managed identity token endpoint (``/metadata/identity/oauth2/token``)."""
        url = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        with self._lock:
            self.imds_calls.append(query)
        if {k.lower(): v for k, v in headers.items()}.get("metadata") != "true":
            return self._json(
                400,
                {"error": "invalid_request", "error_description": "Required metadata header not specified"},
            )
        if url.path != "/metadata/identity/oauth2/token" or method != "GET":
            return self._json(404, {"error": "not_found"})
        expires = int(datetime.now(timezone.utc).timestamp()) + 86399
        return self._json(
            200,
            {
                "access_token": self.imds_token,
                "client_id": "a3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
                "expires_in": "86399",
                "expires_on": str(expires),
                "ext_expires_in": "86399",
                "not_before": str(expires - 86399),
                "resource": query.get("resource", ""),
                "token_type": "Bearer",
            },
        )

    def _instances_ready(self, key: str) -> bool:
        """A scale set's create/update completes when its VMs (extensions included) are provisioned."""
        return all(i.state != "Creating" for i in self.instances.get(key, {}).values())

    def _settle(self, key: str) -> None:
        resource = self.resources.get(key)
        if (
            resource is not None
            and resource["properties"]["provisioningState"] in ("Creating", "Updating")
            and self._instances_ready(key)
        ):
            resource["properties"]["provisioningState"] = "Succeeded"

    def _set_capacity(self, rid: str, capacity: int) -> None:
        key = rid.lower()
        insts = self.instances.setdefault(key, {})
        counter = self._next_instance.setdefault(key, itertools.count())
        resource = self.resources[key]
        prefix = resource["properties"]["virtualMachineProfile"]["osProfile"]["computerNamePrefix"]
        while len(insts) < capacity:
            i = next(counter)
            private, public = self.addresses(resource["name"], i)
            inst = Instance(
                str(i), str(uuid.uuid4()), f"{prefix}{i:06x}", private, public, self.instance_delay
            )
            inst.host_key = (
                self.host_keys(resource["name"], i) if self.host_keys else _generated_host_key(inst.vm_id)
            )
            insts[inst.instance_id] = inst
            if self.on_instance_created is not None:
                self.on_instance_created(resource, inst)
        for iid in sorted(insts, key=int, reverse=True)[: max(0, len(insts) - capacity)]:
            del insts[iid]

    def _delete_instances(self, rid: str, data: Any) -> Reply:
        key = rid.lower()
        ids = [str(i) for i in (data or {}).get("instanceIds", [])]
        for iid in ids:
            if iid in self.instances.get(key, {}):
                self.instances[key][iid].state = "Deleting"
        resource = self.resources[key]
        resource["properties"]["provisioningState"] = "Updating"

        def done() -> None:
            for iid in ids:
                self.instances.get(key, {}).pop(iid, None)
            resource["sku"]["capacity"] = len(self.instances.get(key, {}))
            self._settle(key)

        async_op, location = self._new_op("Microsoft.Compute", resource["location"], done)
        return 202, {"Azure-AsyncOperation": async_op, "Location": location, "Retry-After": "0"}, ""

    def _advance(self, inst: Instance) -> None:
        if inst.state in ("Deleting", "Failed"):
            return
        if inst.lists_until_ready > 0:
            inst.lists_until_ready -= 1
            return
        if inst.state == "Creating":
            inst.state = "Succeeded"
            inst.power = "running"
            if inst.setup == "transitioning":
                inst.setup = "succeeded"
                inst.setup_message = (
                    "Enable succeeded: \n[stdout]\n[batchai] node setup finished\n\n[stderr]\n"
                )

    def _vm(self, rid: str, inst: Instance) -> dict[str, Any]:
        resource = self.resources[rid.lower()]
        vm_id = f"{rid}/virtualMachines/{inst.instance_id}"
        statuses = [
            {
                "code": f"ProvisioningState/{inst.state.lower()}",
                "level": "Info",
                "displayStatus": f"Provisioning {inst.state.lower()}",
                "time": now(),
            }
        ]
        if inst.state == "Failed":
            statuses[0] = {
                "code": "ProvisioningState/failed/AllocationFailed",
                "level": "Error",
                "displayStatus": "Provisioning failed",
                "message": inst.setup_message or "Allocation failed.",
            }
        statuses.append(
            {"code": f"PowerState/{inst.power}", "level": "Info", "displayStatus": f"VM {inst.power}"}
        )
        setup_code = {
            "transitioning": "ProvisioningState/transitioning",
            "succeeded": "ProvisioningState/succeeded",
            "failed": "ProvisioningState/failed/1",
        }[inst.setup]
        view = {
            "platformUpdateDomain": 0,
            "platformFaultDomain": 0,
            "computerName": inst.computer_name,
            "osName": "ubuntu",
            "osVersion": "22.04",
            "vmAgent": {
                "vmAgentVersion": "2.9.1.1",
                "statuses": [
                    {
                        "code": "ProvisioningState/succeeded",
                        "level": "Info",
                        "displayStatus": "Ready",
                        "message": "Guest Agent is running",
                        "time": now(),
                    }
                    if inst.agent_ready
                    else {
                        "code": "ProvisioningState/Unavailable",
                        "level": "Warning",
                        "displayStatus": "Not Ready",
                        "message": "VM status blob is found but not yet populated.",
                        "time": now(),
                    }
                ],
            },
            "extensions": [
                {
                    "name": SETUP_EXTENSION,
                    "type": "Microsoft.Azure.Extensions.CustomScript",
                    "typeHandlerVersion": "2.1.10",
                    "statuses": [
                        {
                            "code": setup_code,
                            "level": "Error" if inst.setup == "failed" else "Info",
                            "displayStatus": "Provisioning " + inst.setup,
                            "message": inst.setup_message,
                        }
                    ],
                }
            ],
            "statuses": statuses,
        }
        return {
            "name": f"{resource['name']}_{inst.instance_id}",
            "id": vm_id,
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            "location": resource["location"],
            "instanceId": inst.instance_id,
            "sku": {"name": resource["sku"]["name"], "tier": "Standard"},
            "tags": resource.get("tags", {}),
            "properties": {
                "latestModelApplied": True,
                "vmId": inst.vm_id,
                "provisioningState": inst.state,
                "hardwareProfile": {"vmSize": resource["sku"]["name"]},
                "osProfile": {
                    "computerName": inst.computer_name,
                    "adminUsername": resource["properties"]["virtualMachineProfile"]["osProfile"][
                        "adminUsername"
                    ],
                },
                "networkProfile": {"networkInterfaces": [{"id": f"{vm_id}/networkInterfaces/nic"}]},
                "instanceView": view,
            },
        }

    def _list_vms(self, rid: str, query: dict[str, str]) -> Reply:
        key = rid.lower()
        insts = sorted(self.instances.get(key, {}).values(), key=lambda i: int(i.instance_id))
        start = int(query.get("$skiptoken", "0"))
        if start == 0:
            for inst in insts:
                self._advance(inst)
            self._settle(key)
        page = insts[start : start + self.page_size]
        body: dict[str, Any] = {"value": [self._vm(rid, i) for i in page]}
        if start + self.page_size < len(insts):
            body["nextLink"] = (
                f"{self.base}{rid}/virtualMachines?api-version=2024-03-01"
                f"&$expand=instanceView&$skiptoken={start + self.page_size}"
            )
        return self._json(200, body)

    def _nic(self, rid: str, inst: Instance) -> dict[str, Any]:
        vm_id = f"{rid}/virtualMachines/{inst.instance_id}"
        nic_id = f"{vm_id}/networkInterfaces/nic"
        return {
            "name": "nic",
            "id": nic_id,
            "properties": {
                "provisioningState": "Succeeded",
                "primary": True,
                "virtualMachine": {"id": vm_id},
                "ipConfigurations": [
                    {
                        "name": "ipconfig",
                        "id": f"{nic_id}/ipConfigurations/ipconfig",
                        "properties": {
                            "privateIPAddress": inst.private_ip,
                            "privateIPAllocationMethod": "Dynamic",
                            "primary": True,
                            "publicIPAddress": {
                                "id": f"{nic_id}/ipConfigurations/ipconfig/publicIPAddresses/pip"
                            },
                        },
                    }
                ],
            },
        }

    def _pip(self, rid: str, inst: Instance) -> dict[str, Any]:
        nic_id = f"{rid}/virtualMachines/{inst.instance_id}/networkInterfaces/nic"
        return {
            "name": "pip",
            "id": f"{nic_id}/ipConfigurations/ipconfig/publicIPAddresses/pip",
            "sku": {"name": "Standard", "tier": "Regional"},
            "properties": {
                "provisioningState": "Succeeded",
                "ipAddress": inst.public_ip,
                "publicIPAddressVersion": "IPv4",
                "publicIPAllocationMethod": "Static",
                "idleTimeoutInMinutes": 30,
                "ipConfiguration": {"id": f"{nic_id}/ipConfigurations/ipconfig"},
            },
        }

    def _run_command(self, rid: str, vmss: str, instance_id: str, data: Any) -> Reply:
        inst = self.instances[rid.lower()][instance_id]
        script = " ".join(data.get("script", []))
        resource = self.resources[rid.lower()]

        def done() -> dict[str, Any]:
            out = inst.host_key if "ssh_host_ed25519_key.pub" in script else ""
            return {
                "value": [
                    {
                        "code": "ProvisioningState/succeeded",
                        "level": "Info",
                        "displayStatus": "Provisioning succeeded",
                        "message": f"Enable succeeded: \n[stdout]\n{out}\n\n[stderr]\n",
                    }
                ]
            }

        if inst.state != "Succeeded":
            return self._error(409, "OperationNotAllowed", "The operation requires the VM to be running.")
        _, location = self._new_op("Microsoft.Compute", resource["location"], done)
        return 202, {"Location": location, "Retry-After": "0"}, ""


def sku(
    name: str,
    family: str,
    vcpus: int,
    gpus: int = 0,
    *,
    locations: tuple[str, ...] = ("eastus",),
    restricted: tuple[str, ...] = (),
    reason: str = "NotAvailableForSubscription",
) -> dict[str, Any]:
    """A ``virtualMachines`` entry of Resource SKUs - List (the ListAvailableResourceSkus example's shape);
    ``restricted``: regions with a Location restriction of ``reason``."""
    capabilities = [
        {"name": "MaxResourceVolumeMB", "value": str(vcpus * 44 * 1024)},
        {"name": "vCPUs", "value": str(vcpus)},
        {"name": "MemoryGB", "value": str(vcpus * 7)},
        {"name": "LowPriorityCapable", "value": "True"},
        {"name": "vCPUsAvailable", "value": str(vcpus)},
    ]
    if gpus:
        capabilities.append({"name": "GPUs", "value": str(gpus)})
    restrictions = [
        {
            "type": "Location",
            "values": [region],
            "restrictionInfo": {"locations": [region]},
            "reasonCode": reason,
        }
        for region in restricted
    ]
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "size": name.removeprefix("Standard_"),
        "family": family,
        "locations": list(locations),
        "locationInfo": [{"location": loc, "zones": ["1", "2", "3"], "zoneDetails": []} for loc in locations],
        "capabilities": capabilities,
        "restrictions": restrictions,
    }


def usage(name: str, localized: str, current: int, limit: int) -> dict[str, Any]:
    """One item of Usage - List (``GET .../locations/{location}/usages``)."""
    return {
        "unit": "Count",
        "currentValue": current,
        "limit": limit,
        "name": {"value": name, "localizedValue": localized},
    }


DEFAULT_SKUS = [
    sku("Standard_D2s_v5", "standardDSv5Family", 2),
    sku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, 1),
    sku("Standard_NC64as_T4_v3", "standardNCASv3_T4Family", 64, 4),
    sku("Standard_NC24ads_A100_v4", "standardNCADSA100v4Family", 24, 1),
    sku("Standard_NC40ads_H100_v5", "standardNCadsH100v5Family", 40, 1, restricted=("eastus",)),
    sku("Standard_ND96isr_H100_v5", "standardNDSH100v5Family", 96, 8),
    sku("Standard_NV36ads_A10_v5", "StandardNVADSA10v5Family", 36, 1),
    sku("Standard_NC6s_v3", "standardNCSv3Family", 6, 1, restricted=("eastus",)),
    sku("Standard_NC4as_T4_v3", "standardNCASv3_T4Family", 4, 1, locations=("westeurope",)),
]
DEFAULT_USAGES = [
    usage("availabilitySets", "Availability Sets", 0, 2500),
    usage("cores", "Total Regional vCPUs", 0, 350),
    usage("virtualMachines", "Virtual Machines", 0, 25000),
    usage("virtualMachineScaleSets", "Virtual Machine Scale Sets", 0, 2500),
    usage("lowPriorityCores", "Total Regional Low-priority vCPUs", 0, 100),
    usage("standardDSv5Family", "Standard DSv5 Family vCPUs", 0, 100),
    usage("standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 0, 64),
    usage("standardNCADSA100v4Family", "Standard NCADS_A100_v4 Family vCPUs", 0, 48),
    usage("standardNDSH100v5Family", "Standard NDSH100v5 Family vCPUs", 0, 0),
]


def _generated_host_key(vm_id: str) -> str:
    """A real ed25519 public key, new for each VM (what ``cat ssh_host_ed25519_key.pub`` prints)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    return public.decode() + f" root@{vm_id[:8]}"
