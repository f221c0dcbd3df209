"""The VMSS path and the Batch account against the ARM request-body definitions (``tests/data/arm_spec``;
issue #30, "the same for the VMSS path"): every body batchai_sdk sends through the public API is valid,
and the fake refuses what ARM refuses (an undeclared member: ``400 InvalidRequestContent``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.compute.models import VirtualMachineScaleSet
from azure.mgmt.network import NetworkManagementClient
from azure.mgmt.network.models import SecurityRule, SecurityRulePropertiesFormat
from azure.mgmt.resource.resources import ResourceManagementClient
from azure_helpers import SUBSCRIPTION, FakeCredential
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk.backends.azure import AzureBackend
from batchai_sdk.backends.azure import provision as prov
from batchai_sdk.backends.azure.clients import AzureClients, ClientOptions

NAMES = prov.WorkspaceNames("batchaidev", SUBSCRIPTION, "batchai.horovod", "eastus", "batchaitest", "share")
FAST = ClientOptions(polling_interval=0, retry_total=0)


def _checked(arm: FakeArm) -> set[str]:
    return {definition for _m, _p, definition, _e in arm.checked_bodies}


def test_every_body_of_a_cluster_lifecycle_is_valid_against_the_spec(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, files: FakeFilesService
) -> None:
    ws = Workspace(make_backend())
    spot = ws.create_cluster("lowpri", vm_size="Standard_NC4as_T4_v3", nodes=1, vm_priority="lowpriority")
    ws.create_cluster("dedicated", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    spot.resize(3)
    arm.make_ready()
    spot.resize(1)
    ws.backend.delete_cluster(spot.spec)
    assert arm.invalid_bodies == []
    assert {
        "resource.ResourceGroup",
        "storage.StorageAccountCreateParameters",
        "network.NetworkSecurityGroup",
        "network.VirtualNetwork",
        "compute.VirtualMachineScaleSet",
    } <= _checked(arm)
    assert len(arm.checked_bodies) >= 6
    ws.close()


def _clients(arm: FakeArm) -> tuple[ResourceManagementClient, ComputeManagementClient]:
    options: dict[str, Any] = {"base_url": arm.base, "polling_interval": 0, "retry_total": 0}
    return (
        ResourceManagementClient(FakeCredential(), SUBSCRIPTION, **options),  # type: ignore[arg-type]
        ComputeManagementClient(FakeCredential(), SUBSCRIPTION, **options),  # type: ignore[arg-type]
    )


BODY: dict[str, Any] = {
    "location": "eastus",
    "sku": {"name": "Standard_D2s_v5", "capacity": 0},
    "properties": {
        "upgradePolicy": {"mode": "Manual"},
        "virtualMachineProfile": {"osProfile": {"computerNamePrefix": "x", "adminUsername": "batchai"}},
    },
}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"overProvision": False}, "overProvision"),  # ARM's member is overprovision
        (
            {
                "virtualMachineProfile": {
                    "osProfile": {
                        "computerNamePrefix": "x",
                        "adminUsername": "batchai",
                        "linuxConfiguration": {"disablePasswordAuth": True},
                    }
                }
            },
            "disablePasswordAuth",
        ),
    ],
)
def test_the_fake_refuses_an_undeclared_property_as_arm_does(
    arm: FakeArm, change: dict[str, Any], named: str
) -> None:
    resource, compute = _clients(arm)
    resource.resource_groups.create_or_update("rg", {"location": "eastus"})
    body = {**BODY, "properties": {**BODY["properties"], **change}}
    with pytest.raises(HttpResponseError) as caught:
        compute.virtual_machine_scale_sets.begin_create_or_update(
            "rg", "vmss", VirtualMachineScaleSet(body)
        ).result()
    assert caught.value.status_code == 400
    assert caught.value.error is not None and caught.value.error.code == "InvalidRequestContent"
    assert named in str(caught.value)
    compute.virtual_machine_scale_sets.begin_create_or_update(
        "rg", "vmss", VirtualMachineScaleSet(BODY)
    ).result()
    assert arm.invalid_bodies[0][3][0].startswith("properties")
    assert arm.checked_bodies[-1][3] == []  # the same body without it is taken
    arm.checked_bodies.clear()  # the refused body was this test's own


def test_a_rule_added_by_hand_is_kept_and_sent_back_without_its_read_only_fields(
    arm: FakeArm, credential: FakeCredential
) -> None:
    """Changing the SSH source re-sends the NSG with the rules someone added (portal, az CLI) as they were
    read: with their ``etag`` and ``provisioningState``, which the spec marks read-only (a request that
    carries them is invalid). Before the bodies were models, they went back verbatim."""
    clients = AzureClients(credential, SUBSCRIPTION, FAST)
    prov.ensure_resource_group(clients, NAMES)
    prov.ensure_network(clients, NAMES, "203.0.113.7/32")
    network = NetworkManagementClient(credential, SUBSCRIPTION, base_url=arm.base, polling_interval=0)
    nsg = network.network_security_groups.get(NAMES.resource_group, NAMES.nsg)
    jupyter = SecurityRule(
        name="jupyter",
        properties=SecurityRulePropertiesFormat(
            protocol="Tcp",
            source_address_prefix="203.0.113.7/32",
            source_port_range="*",
            destination_address_prefix="*",
            destination_port_range="8888",
            access="Allow",
            priority=1010,
            direction="Inbound",
        ),
    )
    assert nsg.properties is not None and nsg.properties.security_rules is not None
    nsg.properties.security_rules.append(jupyter)
    network.network_security_groups.begin_create_or_update(NAMES.resource_group, NAMES.nsg, nsg).result()

    prov.ensure_network(clients, NAMES, "198.51.100.0/24")  # the client moved: the SSH rule changes

    assert arm.invalid_bodies == []
    rules = {
        r["name"]: r["properties"] for r in arm.resources[NAMES.nsg_id.lower()]["properties"]["securityRules"]
    }
    assert rules["jupyter"]["destinationPortRange"] == "8888"
    assert rules[prov.SSH_RULE]["sourceAddressPrefix"] == "198.51.100.0/24"
    clients.close()
