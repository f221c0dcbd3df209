"""SKU and quota preflight (Resource SKUs and Usage APIs) and the scale set's placement settings: the
real azure-mgmt clients against the fake ARM, payloads in the REST examples' shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fake_arm import FakeArm, usage

from batchai_sdk import AzureQuotaError, NotFoundError, Workspace
from batchai_sdk._models import ClusterSpec, VmPriority
from batchai_sdk.backends.azure import AzureBackend, QuotaShortError, SkuNotAvailableError


def set_usage(arm: FakeArm, name: str, localized: str, current: int, limit: int) -> None:
    items = arm.usages["eastus"]
    items[:] = [u for u in items if u["name"]["value"] != name] + [usage(name, localized, current, limit)]


def vmss_puts(arm: FakeArm) -> int:
    return arm.count("PUT", "/virtualMachineScaleSets/[^/]+$")


def test_a_size_restricted_for_the_subscription_is_refused_before_any_resource(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    backend = make_backend()
    spec = ClusterSpec(name="h100", vm_size="Standard_NC40ads_H100_v5", nodes=2)
    with pytest.raises(SkuNotAvailableError) as err:
        backend.create_cluster(spec)

    assert isinstance(err.value, AzureQuotaError) and err.value.code == "SkuNotAvailable"
    text = str(err.value)
    assert "Standard_NC40ads_H100_v5" in text and "eastus" in text
    assert "not available to this subscription" in text
    # the offered GPU sizes: deployable ones only (no restricted H100/V100, no CPU size), current first
    assert err.value.offered[:2] == ("Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4")
    assert "Standard_NC6s_v3" not in text and "Standard_D2s_v5" not in text
    assert arm.count("PUT", ".") == 0 and arm.count("POST", ".") == 0  # nothing was created
    assert arm.count("GET", "/providers/Microsoft.Compute/skus$") >= 1


def test_a_size_not_listed_in_the_region_is_refused(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    backend = make_backend()
    with pytest.raises(SkuNotAvailableError) as err:
        backend.check_cluster(ClusterSpec(name="c", vm_size="Standard_NC8as_T4_v3", nodes=1))
    assert err.value.reason == "NotListed" and "is not offered there" in str(err.value)
    assert arm.count("GET", "/usages$") == 0  # no quota question for a size that cannot be had


def test_a_family_quota_too_small_for_max_nodes_names_the_request_to_file(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = Workspace(make_backend())
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 40, 64)
    puts = arm.count("PUT", ".")
    with pytest.raises(QuotaShortError) as err:
        # starts at 0 nodes, but may grow to 8: 8 × 4 vCPUs must fit
        ws.create_cluster("t4", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=8)

    e = err.value
    assert (e.quota, e.region, e.current, e.limit, e.needed, e.new_limit) == (
        "standardNCASv3_T4Family",
        "eastus",
        40,
        64,
        32,
        72,
    )
    assert "request a new limit of 72 for 'Standard NCASv3_T4 Family vCPUs'" in str(e)
    assert "8 × Standard_NC4as_T4_v3 need 32 more vCPUs" in str(e) and e.code == "QuotaExceeded"
    assert arm.count("PUT", ".") == puts and vmss_puts(arm) == 0
    with pytest.raises(NotFoundError):
        ws.get_cluster("t4")  # no record of a cluster that was never made

    ws.create_cluster("t4", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=6)  # 40 + 24 = 64: fits
    assert vmss_puts(arm) == 1


def test_the_regional_vcpu_quota_is_checked_too(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    backend = make_backend()
    set_usage(arm, "cores", "Total Regional vCPUs", 4, 20)
    with pytest.raises(QuotaShortError) as err:
        backend.check_cluster(ClusterSpec(name="a100", vm_size="Standard_NC24ads_A100_v4", nodes=1))
    assert (err.value.quota, err.value.new_limit) == ("cores", 28)
    assert "'Total Regional vCPUs' (cores) in eastus" in str(err.value)


def test_a_new_subscriptions_zero_gpu_quota_is_caught(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    with pytest.raises(QuotaShortError) as err:
        make_backend().check_cluster(ClusterSpec(name="nd", vm_size="Standard_ND96isr_H100_v5", nodes=2))
    assert (err.value.quota, err.value.limit, err.value.new_limit) == ("standardNDSH100v5Family", 0, 192)


def test_spot_clusters_are_checked_against_the_low_priority_quota(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    backend = make_backend()
    set_usage(arm, "lowPriorityCores", "Total Regional Low-priority vCPUs", 90, 100)
    spot = ClusterSpec(name="s", vm_size="Standard_NC4as_T4_v3", nodes=4, vm_priority=VmPriority.LOWPRIORITY)
    with pytest.raises(QuotaShortError) as err:
        backend.check_cluster(spot)
    assert (err.value.quota, err.value.new_limit) == ("lowPriorityCores", 106)
    # the same size dedicated draws on the family and regional quotas, which have room
    sku = backend.check_cluster(ClusterSpec(name="d", vm_size="Standard_NC4as_T4_v3", nodes=4))
    assert (sku.vcpus, sku.gpus, sku.family) == (4, 1, "standardNCASv3_T4Family")


def test_a_passing_preflight_lets_creation_go_on_and_cluster_check_runs_it(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("t4", vm_size="Standard_NC4as_T4_v3", nodes=2)
    order = [(m, p) for m, p in arm.calls]
    skus = next(i for i, (m, p) in enumerate(order) if p.endswith("/providers/Microsoft.Compute/skus"))
    usages = next(i for i, (m, p) in enumerate(order) if p.endswith("/locations/eastus/usages"))
    put = next(i for i, (m, p) in enumerate(order) if m == "PUT" and "/virtualMachineScaleSets/" in p)
    assert skus < put and usages < put
    assert vmss_puts(arm) == 1

    # 60 vCPUs in use, 8 of them this cluster's: a second one of 2 that may grow to 4 needs 16 (fits in 80)
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 60, 80)
    grows = ws.create_cluster(
        "t4b", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=4, initial_nodes=2
    )
    # Azure's usage now counts both clusters' VMs; the quota was lowered meanwhile
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 68, 72)
    cluster.check()  # at its largest already (max_nodes 2): nothing more needed
    with pytest.raises(QuotaShortError) as err:
        grows.check()  # 2 more × 4 vCPUs: 76 > 72
    assert err.value.new_limit == 76 and "(2 of them running already) need 8 more vCPUs" in str(err.value)


def test_case_and_location_of_the_size_and_zone_restrictions(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    from fake_arm import sku

    zonal = sku("Standard_NC16as_T4_v3", "standardNCASv3_T4Family", 16, 1)
    zonal["restrictions"] = [
        {
            "type": "Zone",
            "values": ["eastus"],
            "restrictionInfo": {"locations": ["eastus"], "zones": ["1", "2"]},
            "reasonCode": "NotAvailableForSubscription",
        }
    ]
    arm.skus.append(zonal)
    backend = make_backend()
    # a Zone restriction does not stop a regional scale set; the size's case does not matter
    assert backend.check_cluster(ClusterSpec(name="z", vm_size="standard_nc16as_t4_v3", nodes=1)).vcpus == 16


# -- the scale set body ------------------------------------------------------------------------------------
def vmss_body(arm: FakeArm, name: str) -> dict[str, Any]:
    return [b for m, p, b in arm.bodies if m == "PUT" and p.endswith(f"/virtualMachineScaleSets/{name}")][-1]


def test_single_placement_group_follows_max_nodes_and_the_public_ip_has_no_sku(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 0, 1000)
    set_usage(arm, "cores", "Total Regional vCPUs", 0, 1000)
    ws = Workspace(make_backend())
    ws.create_cluster("small", vm_size="Standard_NC4as_T4_v3", nodes=2)
    ws.create_cluster("big", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=150)

    small, big = vmss_body(arm, "small"), vmss_body(arm, "big")
    assert small["properties"]["singlePlacementGroup"] is True  # InfiniBand reaches every node
    assert big["sku"]["capacity"] == 0 and big["properties"]["singlePlacementGroup"] is False
    assert small["properties"]["orchestrationMode"] == "Uniform"
    ipconfig = small["properties"]["virtualMachineProfile"]["networkProfile"][
        "networkInterfaceConfigurations"
    ][0]["properties"]["ipConfigurations"][0]["properties"]
    # the spec: a public IP configuration's "sku" can only be set on Flexible scale sets
    assert "sku" not in ipconfig["publicIPAddressConfiguration"]


def test_growing_past_100_nodes_leaves_the_single_placement_group(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    set_usage(arm, "standardDSv5Family", "Standard DSv5 Family vCPUs", 0, 1000)
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("cpu", vm_size="Standard_D2s_v5", nodes=2)
    assert vmss_body(arm, "cpu")["properties"]["singlePlacementGroup"] is True

    cluster.resize(50)
    cluster.resize(101)
    patches = [b for m, p, b in arm.bodies if m == "PATCH" and p.endswith("/virtualMachineScaleSets/cpu")]
    assert patches[0] == {"sku": {"capacity": 50}}  # within one group: left as it is
    assert patches[1] == {"sku": {"capacity": 101}, "properties": {"singlePlacementGroup": False}}
    assert len(arm.instances[next(k for k in arm.instances if k.endswith("/cpu"))]) == 101


def test_a_resize_beyond_the_quota_is_refused_before_the_patch(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("t4", vm_size="Standard_NC4as_T4_v3", nodes=2)
    arm.make_ready()
    # Azure's usage counts the 2 VMs; 16 of 24 in use
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 16, 24)
    cluster.resize(4)  # 2 more × 4 = 8: fits exactly
    set_usage(arm, "standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 24, 24)  # as Azure counts
    with pytest.raises(QuotaShortError) as err:
        cluster.resize(6)
    assert err.value.new_limit == 32 and "(4 of them running already) need 8 more vCPUs" in str(err.value)
    patches = [b for m, p, b in arm.bodies if m == "PATCH" and p.endswith("/virtualMachineScaleSets/t4")]
    assert patches == [{"sku": {"capacity": 4}}]
    first_pages = [
        q
        for (m, path), q in zip(arm.calls, arm.queries, strict=True)
        if path.endswith("/skus") and "$skiptoken" not in q
    ]
    assert len(first_pages) == 1  # the region's size list is read once per session (it has pages)
    assert arm.count("GET", "/providers/Microsoft.Compute/skus$") > 1
