"""Everything batchai_sdk tagged in a subscription — what may still cost money — in one list.

Every resource the SDK makes carries the tag ``batchai-workspace=<workspace>`` (a scale set also
``batchai-cluster``; a resource group the SDK created also ``batchai-created-by``). ``sweep`` asks ARM for
them across the whole subscription, whatever the resource group or region:

- ``GET /subscriptions/{id}/resourcegroups?$filter=tagName eq 'batchai-workspace'`` for the groups;
- ``GET /subscriptions/{id}/resources?$filter=tagName eq 'batchai-workspace'&$expand=createdTime`` for
  the rest (with ``and tagValue eq '<workspace>'`` for one workspace).

A scale set's ``sku.capacity`` is its VM count: the nodes that are billed now. ARM does not return the
tags (nor ``$expand``'s created time) of resources filtered by tag name *and* value, so the workspace is
then the one asked for, the cluster is the scale set's name, and the created time may be unknown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from .clients import AzureClients, ClientOptions
from .errors import azure_call
from .provision import TAG_CLUSTER, TAG_WORKSPACE

SCALE_SET = "Microsoft.Compute/virtualMachineScaleSets"
RESOURCE_GROUP = "Microsoft.Resources/resourceGroups"


@dataclass(frozen=True)
class TaggedResource:
    """One resource batchai_sdk made (by its tag). ``nodes``: VMs of a scale set (None for others)."""

    resource_group: str
    type: str
    name: str
    location: str
    workspace: str | None
    cluster: str | None
    vm_size: str | None
    nodes: int | None
    created: datetime | None
    id: str

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["created"] = self.created.isoformat() if self.created else None
        return data


def _as_dict(model: Any) -> dict[str, Any]:
    return dict(model.as_dict()) if hasattr(model, "as_dict") else dict(model)


def _group_of(resource_id: str) -> str:
    parts = resource_id.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.lower() == "resourcegroups":
            return parts[i + 1]
    return ""


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def tag_filter(workspace: str | None = None) -> str:
    """The ``$filter`` for the SDK's resources: every workspace's, or one's."""
    if workspace is None:
        return f"tagName eq '{TAG_WORKSPACE}'"
    return f"tagName eq '{TAG_WORKSPACE}' and tagValue eq '{workspace.replace(chr(39), chr(39) * 2)}'"


def list_tagged(clients: AzureClients, workspace: str | None = None) -> list[TaggedResource]:
    """The SDK's resource groups and resources in the clients' subscription, sorted by group, type, name."""
    where = f"workspace {workspace}" if workspace else "every workspace"
    out: list[TaggedResource] = []
    with azure_call(f"list the resource groups tagged by batchai_sdk ({where})"):
        groups = [_as_dict(g) for g in clients.resource.resource_groups.list(filter=tag_filter(workspace))]
    for group in groups:
        tags = group.get("tags") or {}
        out.append(
            TaggedResource(
                resource_group=str(group.get("name") or ""),
                type=RESOURCE_GROUP,
                name=str(group.get("name") or ""),
                location=str(group.get("location") or ""),
                workspace=tags.get(TAG_WORKSPACE, workspace),
                cluster=None,
                vm_size=None,
                nodes=None,
                created=None,
                id=str(group.get("id") or ""),
            )
        )
    with azure_call(f"list the resources tagged by batchai_sdk ({where})"):
        resources = [
            _as_dict(r)
            for r in clients.resource.resources.list(filter=tag_filter(workspace), expand="createdTime")
        ]
    for r in resources:
        tags = r.get("tags") or {}
        kind = str(r.get("type") or "")
        is_vmss = kind.lower() == SCALE_SET.lower()
        sku = r.get("sku") or {}
        capacity = sku.get("capacity")
        out.append(
            TaggedResource(
                resource_group=_group_of(str(r.get("id") or "")),
                type=kind,
                name=str(r.get("name") or ""),
                location=str(r.get("location") or ""),
                workspace=tags.get(TAG_WORKSPACE, workspace),
                cluster=tags.get(TAG_CLUSTER) or (str(r.get("name")) if is_vmss else None),
                vm_size=str(sku["name"]) if is_vmss and sku.get("name") else None,
                nodes=int(capacity) if is_vmss and capacity is not None else (0 if is_vmss else None),
                created=_time(r.get("createdTime")),
                id=str(r.get("id") or ""),
            )
        )
    return sorted(out, key=lambda t: (t.resource_group.lower(), t.type != RESOURCE_GROUP, t.type, t.name))


def sweep(
    subscription_id: str | None = None,
    *,
    credential: Any | None = None,
    workspace: str | None = None,
    base_url: str | None = None,
    **client_kwargs: Any,
) -> list[TaggedResource]:
    """Every resource batchai_sdk tagged in the subscription (``AZURE_SUBSCRIPTION_ID`` by default), across
    resource groups and regions — or only ``workspace``'s. Read-only: it deletes nothing (``ws.delete()``
    or ``az group delete`` does). ``credential``: a TokenCredential (default: DefaultAzureCredential);
    ``client_kwargs``: pipeline settings passed to the client (``retry_total=``, ``transport=``, ...)."""
    options = ClientOptions(base_url=base_url or ClientOptions.base_url, extra=dict(client_kwargs))
    clients = AzureClients(credential, subscription_id, options)
    try:
        return list_tagged(clients, workspace)
    finally:
        clients.close()
