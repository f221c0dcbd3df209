"""The workspace's Batch account (azure-mgmt-batch) and its core quotas.

Pool allocation mode is **Batch service**: the pools' VMs live in subscriptions the Batch service owns,
so the workspace needs no Key Vault and no subscription-wide role for the Batch service principal (both
required by user-subscription mode), and a pool is one data-plane call. The price of that choice is that
the account's own core quotas apply, not the subscription's: ``check_account_quota`` reads them
(``dedicatedCoreQuotaPerVMFamily`` when enforced, else ``dedicatedCoreQuota``; ``lowPriorityCoreQuota``
for Spot) before a pool is asked for, as the VM-scale-set engine reads the subscription's usages.

The account is named from the workspace like the storage account (never random: a second
``Workspace.azure(..., engine="batch")`` finds it) and uses the workspace's storage account as its
auto-storage account. Bodies are the REST shapes of the ``BatchAccountCreate_Default`` example.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..._models import VmPriority
from ...exceptions import AzureError, ValidationError
from ..azure.clients import AzureClients
from ..azure.errors import azure_call, call_or_none
from ..azure.preflight import QuotaShortError, SkuInfo
from ..azure.provision import WorkspaceNames, _dict
from .models import mgmt

BATCH_SERVICE = "BatchService"
DEDICATED = "dedicatedCoreQuota"
SPOT = "lowPriorityCoreQuota"


def batch_account_name(workspace: str, subscription_id: str, resource_group: str) -> str:
    """3-24 lowercase letters and digits, unique per region in practice, the same on every call."""
    digest = hashlib.sha256(
        f"batch/{subscription_id}/{resource_group}/{workspace}".lower().encode()
    ).hexdigest()
    stem = re.sub(r"[^a-z0-9]", "", workspace.lower())[:8]
    return ("bab" + stem + digest)[:24]


def validate_batch_account(name: str) -> str:
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9]{3,24}", name):
        raise ValidationError("batch_account", name, "3-24 lowercase letters and digits")
    return name


@dataclass(frozen=True)
class BatchAccount:
    """What the engine needs of its account: the data-plane endpoint and the quota properties."""

    name: str
    endpoint: str  # https://<account>.<region>.batch.azure.com
    properties: Mapping[str, Any]


def account_body(names: WorkspaceNames) -> mgmt.BatchAccountCreateParameters:
    storage_id = (
        f"/subscriptions/{names.subscription_id}/resourceGroups/{names.resource_group}"
        f"/providers/Microsoft.Storage/storageAccounts/{names.storage_account}"
    )
    return mgmt.BatchAccountCreateParameters(
        location=names.location,
        tags=names.tags(),
        properties=mgmt.BatchAccountCreateProperties(
            auto_storage=mgmt.AutoStorageBaseProperties(storage_account_id=storage_id),
            pool_allocation_mode=mgmt.PoolAllocationMode.BATCH_SERVICE,
        ),
    )


def _account(name: str, raw: Mapping[str, Any]) -> BatchAccount:
    props = dict(raw.get("properties") or {})
    endpoint = str(props.get("accountEndpoint") or "")
    if not endpoint:
        raise AzureError(f"Batch account {name} has no endpoint yet", code="NoAccountEndpoint")
    if not endpoint.startswith("https://"):
        endpoint = "https://" + endpoint
    return BatchAccount(name=name, endpoint=endpoint, properties=props)


def get_account(clients: AzureClients, names: WorkspaceNames, account: str) -> BatchAccount | None:
    raw = call_or_none(
        f"read Batch account {account}", clients.batch.batch_account.get, names.resource_group, account
    )
    return None if raw is None else _account(account, _dict(raw))


def ensure_account(clients: AzureClients, names: WorkspaceNames, account: str) -> BatchAccount:
    """Create the Batch account unless it exists (idempotent); its endpoint and quotas."""
    found = get_account(clients, names, account)
    if found is not None:
        return found
    with azure_call(f"create Batch account {account}"):
        raw = clients.batch.batch_account.begin_create(
            names.resource_group, account, account_body(names)
        ).result()
    return _account(account, _dict(raw))


def delete_account(clients: AzureClients, names: WorkspaceNames, account: str) -> None:
    with azure_call(f"delete Batch account {account}"):
        try:
            clients.batch.batch_account.begin_delete(names.resource_group, account)
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) != 404:
                raise


def _family_quota(per_family: Iterable[Mapping[str, Any]], family: str) -> int | None:
    for entry in per_family:
        if str(entry.get("name") or "").lower() == family.lower():
            return int(entry.get("coreQuota") or 0)
    return None


def cores_in_use(
    pools: Iterable[Mapping[str, Any]],
    skus: Mapping[str, SkuInfo],
    sku: SkuInfo,
    priority: VmPriority,
    properties: Mapping[str, Any],
) -> int:
    """Cores of the quota ``sku`` draws from that the account's other pools hold (REST JSON, pure):
    their Spot nodes for Spot; for dedicated, the nodes of the same family when the account enforces
    per-family quotas, else all dedicated nodes."""
    spot = priority is VmPriority.LOWPRIORITY
    per_family = bool(properties.get("dedicatedCoreQuotaPerVMFamilyEnforced"))
    used = 0
    for pool in pools:
        other = skus.get(str(pool.get("vmSize") or "").lower())
        if other is None:
            continue
        if not spot and per_family and other.family.lower() != sku.family.lower():
            continue
        count = pool.get("currentLowPriorityNodes") if spot else pool.get("currentDedicatedNodes")
        used += int(count or 0) * other.vcpus
    return used


def check_account_quota(
    properties: Mapping[str, Any],
    sku: SkuInfo,
    *,
    region: str,
    account: str,
    nodes: int,
    priority: VmPriority,
    in_use_cores: int = 0,
) -> None:
    """Raise QuotaShortError when the account's core quota cannot hold ``nodes`` more × ``sku`` (pure).

    ``in_use_cores``: cores the account's pools hold already of that quota (the account reports limits,
    not usage, so the engine counts its own pools)."""
    needed = nodes * sku.vcpus
    if needed <= 0:
        return
    if priority is VmPriority.LOWPRIORITY:
        quota, description = SPOT, f"Spot cores of Batch account {account}"
        limit = properties.get(SPOT)
    else:
        enforced = bool(properties.get("dedicatedCoreQuotaPerVMFamilyEnforced"))
        family = _family_quota(properties.get("dedicatedCoreQuotaPerVMFamily") or (), sku.family)
        if enforced:
            quota, description = sku.family, f"{sku.family} cores of Batch account {account}"
            limit = family if family is not None else 0
        else:
            quota, description = DEDICATED, f"dedicated cores of Batch account {account}"
            limit = properties.get(DEDICATED)
    if limit is None:
        return  # not reported: let the service decide
    if in_use_cores + needed > int(limit):
        raise QuotaShortError(
            quota,
            description,
            region,
            current=in_use_cores,
            limit=int(limit),
            needed=needed,
            nodes=nodes,
            size=sku.name,
        )
