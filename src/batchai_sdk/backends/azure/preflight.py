"""Preflight of a cluster on Azure: is the VM size offered here, and is there vCPU quota for it?

Run before any resource is created (``AzureBackend.check_cluster``, called by ``create_cluster``), from two
read-only ARM calls:

- Resource SKUs (``GET /subscriptions/{id}/providers/Microsoft.Compute/skus?$filter=location eq '<region>'``):
  the size must be listed for the region without a ``Location`` restriction (reasonCode
  ``NotAvailableForSubscription``: the subscription may not deploy it there). ``Zone`` restrictions do not
  matter: the scale sets are regional. The listing also gives the size's vCPUs and its quota family.
- Usage (``GET /subscriptions/{id}/providers/Microsoft.Compute/locations/{region}/usages``): the regional
  vCPU quota (``cores``) and the family's (e.g. ``standardNCASv3_T4Family``) for a dedicated cluster, the
  regional Spot quota (``lowPriorityCores``) for a low-priority one, must each leave room for ``max_nodes``
  × the size's vCPUs.

A refusal is an ``AzureQuotaError`` (``SkuNotAvailableError`` or ``QuotaShortError``) that says what to do:
another size or region (naming offered GPU sizes), or the exact quota request to file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ... import vm_sizes
from ..._models import VmPriority
from ...exceptions import AzureQuotaError
from .clients import AzureClients
from .errors import azure_call

REGIONAL = "cores"  # "Total Regional vCPUs"
SPOT = "lowPriorityCores"  # "Total Regional Low-priority vCPUs": Spot VMs of every family
OFFERED_SHOWN = 5


class SkuNotAvailableError(AzureQuotaError):
    """The VM size is not offered in the region, or not to this subscription there.

    ``size``, ``region``, ``reason`` (Azure's reasonCode, or ``NotListed``) and ``offered`` (GPU sizes the
    subscription can deploy in the region, current ones first)."""

    def __init__(self, size: str, region: str, reason: str, offered: tuple[str, ...]) -> None:
        self.size = size
        self.region = region
        self.reason = reason
        self.offered = offered
        why = (
            "is not offered there"
            if reason == "NotListed"
            else "is not available to this subscription there"
            if reason == "NotAvailableForSubscription"
            else f"is restricted there ({reason})"
        )
        some = ", ".join(offered) if offered else "none"
        hint = (
            f"choose another vm_size or location; GPU sizes offered to this subscription in {region}: {some} "
            f"(`az vm list-skus --location {region} --size Standard_N --all --output table`)"
        )
        super().__init__(
            f"VM size {size} {why} in {region} — {hint}", code="SkuNotAvailable", status=None, hint=hint
        )


class QuotaShortError(AzureQuotaError):
    """A vCPU quota of the region is too small for the cluster at ``max_nodes``.

    ``quota`` (the usage name, e.g. ``standardNCASv3_T4Family``, ``cores``, ``lowPriorityCores``),
    ``description`` (Azure's name for it), ``region``, ``current`` and ``limit`` (vCPUs), ``needed`` (this
    cluster's vCPUs) and ``new_limit``: the limit to request, ``current + needed``."""

    def __init__(
        self,
        quota: str,
        description: str,
        region: str,
        *,
        current: int,
        limit: int,
        needed: int,
        nodes: int,
        size: str,
        in_use: int = 0,
    ) -> None:
        self.quota = quota
        self.description = description
        self.region = region
        self.current = current
        self.limit = limit
        self.needed = needed
        self.new_limit = current + needed
        hint = (
            f"request a new limit of {self.new_limit} for '{description}' ({quota}) in {region} "
            "(Azure portal → Quotas → Compute, or Subscriptions → Usage + quotas), or ask for fewer nodes, "
            "a smaller vm_size or another location"
        )
        who = f"{nodes} × {size}" + (f" ({in_use} of them running already)" if in_use else "")
        super().__init__(
            f"{who} need {needed} more vCPUs of '{description}' ({quota}) in {region}, which has "
            f"{limit - current} free ({current} of {limit} in use) — {hint}",
            code="QuotaExceeded",
            status=None,
            hint=hint,
        )


@dataclass(frozen=True)
class SkuInfo:
    """What the preflight needs of one ``virtualMachines`` entry of the Resource SKUs list."""

    name: str
    family: str
    vcpus: int
    gpus: int
    restriction: str | None  # reasonCode of a Location restriction in the region; None: deployable


def _capability(sku: Mapping[str, Any], name: str) -> int:
    for cap in sku.get("capabilities") or ():
        if str(cap.get("name")) == name:
            try:
                return int(float(str(cap.get("value"))))
            except ValueError:
                return 0
    return 0


def parse_skus(raw: Iterable[Mapping[str, Any]], region: str) -> dict[str, SkuInfo]:
    """Lower-case size name → SkuInfo, for the region's ``virtualMachines`` entries (REST JSON)."""
    out: dict[str, SkuInfo] = {}
    for sku in raw:
        if str(sku.get("resourceType") or sku.get("resource_type") or "") != "virtualMachines":
            continue
        locations = [str(x).lower() for x in sku.get("locations") or ()]
        if locations and region.lower() not in locations:
            continue
        restriction = None
        for r in sku.get("restrictions") or ():
            if str(r.get("type")) != "Location":
                continue  # a Zone restriction: still deployable as a regional scale set
            where = [str(x).lower() for x in (r.get("values") or ())]
            info = r.get("restrictionInfo") or r.get("restriction_info") or {}
            where += [str(x).lower() for x in info.get("locations") or ()]
            if not where or region.lower() in where:
                restriction = str(r.get("reasonCode") or r.get("reason_code") or "Restricted")
        name = str(sku.get("name") or "")
        out[name.lower()] = SkuInfo(
            name=name,
            family=str(sku.get("family") or ""),
            vcpus=_capability(sku, "vCPUs"),
            gpus=_capability(sku, "GPUs"),
            restriction=restriction,
        )
    return out


def offered_gpu_sizes(skus: Mapping[str, SkuInfo], limit: int = OFFERED_SHOWN) -> tuple[str, ...]:
    """Up to ``limit`` deployable GPU sizes: current sizes of the table first, then the smallest others."""
    usable = [s for s in skus.values() if s.gpus > 0 and s.restriction is None]
    known = [s for s in usable if (e := vm_sizes.lookup(s.name)) is not None and not e.is_retired]
    others = [s for s in usable if vm_sizes.lookup(s.name) is None]
    ordered = sorted(known, key=lambda s: s.vcpus) + sorted(others, key=lambda s: (s.vcpus, s.name))
    return tuple(s.name for s in ordered[:limit])


def check_size_and_quota(
    skus: Mapping[str, SkuInfo],
    usages: Iterable[Mapping[str, Any]],
    *,
    size: str,
    region: str,
    max_nodes: int,
    priority: VmPriority,
    in_use: int = 0,
) -> SkuInfo:
    """Raise SkuNotAvailableError or QuotaShortError, or return the size's SkuInfo (pure: REST JSON in).

    ``in_use``: VMs of this cluster that exist already — the usage counts them, so only the
    ``max_nodes - in_use`` more are checked."""
    sku = skus.get(size.lower())
    if sku is None or sku.restriction is not None:
        raise SkuNotAvailableError(
            size, region, "NotListed" if sku is None else str(sku.restriction), offered_gpu_sizes(skus)
        )
    needed = max(0, max_nodes - in_use) * sku.vcpus
    if needed <= 0:
        return sku
    by_name = {str((u.get("name") or {}).get("value") or ""): u for u in usages}
    wanted = [SPOT] if priority is VmPriority.LOWPRIORITY else [sku.family, REGIONAL]
    for quota in wanted:
        usage = by_name.get(quota)
        if usage is None:
            continue  # not reported: let ARM decide
        current, limit = int(usage.get("currentValue") or 0), int(usage.get("limit") or 0)
        if limit >= 0 and current + needed > limit:
            description = str((usage.get("name") or {}).get("localizedValue") or quota)
            raise QuotaShortError(
                quota,
                description,
                region,
                current=current,
                limit=limit,
                needed=needed,
                nodes=max_nodes,
                size=sku.name,
                in_use=in_use,
            )
    return sku


def _as_dict(model: Any) -> dict[str, Any]:
    if hasattr(model, "as_dict"):
        return dict(model.as_dict())
    return dict(model)


def list_skus(clients: AzureClients, region: str) -> dict[str, SkuInfo]:
    """The region's VM sizes as the subscription sees them (one paged call)."""
    with azure_call(f"list the VM sizes offered in {region}"):
        raw = [_as_dict(s) for s in clients.compute.resource_skus.list(filter=f"location eq '{region}'")]
    return parse_skus(raw, region)


def list_usages(clients: AzureClients, region: str) -> list[dict[str, Any]]:
    """The subscription's compute quotas in the region, with their current use."""
    with azure_call(f"read the compute quotas of {region}"):
        return [_as_dict(u) for u in clients.compute.usage.list(region)]


def preflight(
    clients: AzureClients,
    *,
    size: str,
    region: str,
    max_nodes: int,
    priority: VmPriority,
    in_use: int = 0,
    skus: Mapping[str, SkuInfo] | None = None,
) -> SkuInfo:
    """Both checks against Azure; no resource is created or changed. ``skus``: the region's list from an
    earlier ``list_skus`` (it changes rarely; the usage is always read afresh)."""
    skus = skus if skus is not None else list_skus(clients, region)
    sku = skus.get(size.lower())
    usages = list_usages(clients, region) if sku is not None and sku.restriction is None else []
    return check_size_and_quota(
        skus, usages, size=size, region=region, max_nodes=max_nodes, priority=priority, in_use=in_use
    )
