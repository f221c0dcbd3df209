"""The ARM calls that make a workspace's resources, through the management SDKs.

Names are derived from the workspace and never random, so a second ``Workspace.azure(...)`` with the
same arguments finds what the first made. Bodies are the REST shapes of the ARM API (the same JSON as
the azure-rest-api-specs examples); every resource carries the ``batchai-workspace`` tag and a scale
set also ``batchai-cluster``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import ipaddress
import logging
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._models import ClusterSpec, VmPriority
from ...exceptions import AzureError, ValidationError
from .clients import AzureClients
from .errors import azure_call, call_or_none
from .models import am, cm, nm, rm, sm
from .states import SETUP_EXTENSION

log = logging.getLogger(__name__)

TAG_WORKSPACE = "batchai-workspace"
TAG_CLUSTER = "batchai-cluster"
TAG_CREATED_BY = "batchai-created-by"  # on a resource group we created (so ws.delete() may remove it)

# Azure HPC image: Ubuntu 22.04 with the NVIDIA driver, CUDA, NCCL and OpenMPI/HPC-X (docs/azure.md).
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
VNET_PREFIX = "10.0.0.0/16"
SUBNET_PREFIX = "10.0.0.0/20"
SSH_RULE = "batchai-ssh-from-client"


def storage_account_name(workspace: str, subscription_id: str, resource_group: str) -> str:
    """3-24 lowercase letters and digits, globally unique in practice, the same on every call."""
    digest = hashlib.sha256(f"{subscription_id}/{resource_group}/{workspace}".lower().encode()).hexdigest()
    stem = re.sub(r"[^a-z0-9]", "", workspace.lower())[:8]
    return ("bai" + stem + digest)[:24]


def validate_storage_account(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9]{3,24}", name or ""):
        raise ValidationError("storage_account", name, "3-24 lowercase letters and digits")
    return name


def validate_share_name(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]", name or ""):
        raise ValidationError("share_name", name, "3-63 lowercase letters, digits and single hyphens")
    return name


def validate_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except (ValueError, AttributeError):
        raise ValidationError("ssh_source_cidr", value, "an address or CIDR such as 203.0.113.7/32") from None


def computer_name_prefix(cluster: str) -> str:
    """A hostname prefix from the cluster name: lowercase letters, digits, hyphens, at most 9 characters."""
    prefix = re.sub(r"[^a-z0-9-]", "-", cluster.lower()).strip("-")[:9].strip("-")
    return prefix or "node"


def parse_image(image: str) -> dict[str, str]:
    """``publisher:offer:sku:version`` (a marketplace URN) or an image/gallery resource id."""
    if image.startswith("/subscriptions/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4 or not all(parts):
        raise ValidationError("image", image, "'publisher:offer:sku:version' or an image resource id")
    return {"publisher": parts[0], "offer": parts[1], "sku": parts[2], "version": parts[3]}


@dataclass(frozen=True)
class WorkspaceNames:
    workspace: str
    subscription_id: str
    resource_group: str
    location: str
    storage_account: str
    share: str

    @property
    def vnet(self) -> str:
        return f"{self.workspace}-vnet"

    @property
    def subnet(self) -> str:
        return "nodes"

    @property
    def nsg(self) -> str:
        return f"{self.workspace}-nsg"

    @property
    def subnet_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/virtualNetworks/{self.vnet}/subnets/{self.subnet}"
        )

    @property
    def nsg_id(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Network/networkSecurityGroups/{self.nsg}"
        )

    def tags(self, cluster: str | None = None) -> dict[str, str]:
        tags = {TAG_WORKSPACE: self.workspace}
        if cluster is not None:
            tags[TAG_CLUSTER] = cluster
        return tags


def _dict(model: Any) -> dict[str, Any]:
    """The REST JSON of an SDK model (they are mappings of the wire format)."""
    if model is None:
        return {}
    if hasattr(model, "as_dict"):
        return dict(model.as_dict())
    return dict(model)


# -- resource group -----------------------------------------------------------------------------------
def get_resource_group(clients: AzureClients, names: WorkspaceNames) -> dict[str, Any] | None:
    found = call_or_none(
        f"read resource group {names.resource_group}",
        clients.resource.resource_groups.get,
        names.resource_group,
    )
    return None if found is None else _dict(found)


def ensure_resource_group(clients: AzureClients, names: WorkspaceNames) -> bool:
    """Create the resource group unless it exists (an existing group's tags are left alone).

    Returns True when this workspace created it (tagged ``batchai-created-by``) and may delete it.
    """
    existing = get_resource_group(clients, names)
    if existing is not None:
        tags = existing.get("tags") or {}
        return bool(tags.get(TAG_CREATED_BY) == names.workspace)
    body = rm.ResourceGroup(location=names.location, tags={**names.tags(), TAG_CREATED_BY: names.workspace})
    with azure_call(f"create resource group {names.resource_group}"):
        clients.resource.resource_groups.create_or_update(names.resource_group, body)
    return True


def delete_resource_group(clients: AzureClients, names: WorkspaceNames, *, timeout: float | None) -> None:
    operation = f"delete resource group {names.resource_group}"
    poller = call_or_none(operation, clients.resource.resource_groups.begin_delete, names.resource_group)
    if poller is not None:
        _wait(poller, operation, timeout)


# -- storage ------------------------------------------------------------------------------------------
def read_storage_account(clients: AzureClients, names: WorkspaceNames) -> Any:
    """The workspace's storage account, or None when it does not exist."""
    return call_or_none(
        f"read storage account {names.storage_account}",
        clients.storage.storage_accounts.get_properties,
        names.resource_group,
        names.storage_account,
    )


def ensure_storage_account(clients: AzureClients, names: WorkspaceNames) -> str:
    """Create the storage account unless it exists; return its first key (kept in memory only)."""
    accounts = clients.storage.storage_accounts
    existing = read_storage_account(clients, names)
    if existing is None:
        body = sm.StorageAccountCreateParameters(
            location=names.location,
            tags=names.tags(),
            sku=sm.Sku(name="Standard_LRS"),
            kind="StorageV2",
            properties=sm.StorageAccountPropertiesCreateParameters(
                minimum_tls_version="TLS1_2",
                enable_https_traffic_only=True,
                allow_blob_public_access=False,
                allow_shared_key_access=True,  # SMB mounts of Azure Files authenticate with the key
            ),
        )
        with azure_call(f"create storage account {names.storage_account}"):
            accounts.begin_create(names.resource_group, names.storage_account, body).result()
    with azure_call(f"read the keys of storage account {names.storage_account}"):
        keys = _dict(accounts.list_keys(names.resource_group, names.storage_account)).get("keys") or []
    for key in keys:
        if key.get("value") and str(key.get("permissions", "Full")).lower() == "full":
            return str(key["value"])
    raise AzureError(f"storage account {names.storage_account} returned no usable key", code="NoStorageKey")


# -- network ------------------------------------------------------------------------------------------
def nsg_body(
    names: WorkspaceNames, ssh_source_cidr: str, others: Sequence[Mapping[str, Any]] = ()
) -> nm.NetworkSecurityGroup:
    """The NSG: ``others`` (rules someone added by hand, as read) kept, then the SSH rule."""
    ssh = nm.SecurityRule(
        name=SSH_RULE,
        properties=nm.SecurityRulePropertiesFormat(
            description="SSH to the cluster nodes from the batchai_sdk client only",
            protocol="Tcp",
            source_address_prefix=ssh_source_cidr,
            source_port_range="*",
            destination_address_prefix="*",
            destination_port_range="22",
            access="Allow",
            priority=1000,
            direction="Inbound",
        ),
    )
    return nm.NetworkSecurityGroup(
        location=names.location,
        tags=names.tags(),
        properties=nm.NetworkSecurityGroupPropertiesFormat(
            security_rules=[nm.SecurityRule(rule) for rule in others] + [ssh]
        ),
    )


def ensure_network(clients: AzureClients, names: WorkspaceNames, ssh_source_cidr: str) -> str:
    """NSG (SSH from ``ssh_source_cidr`` only; the default rules keep VNet-internal traffic open for
    MPI/NCCL and deny the rest of the internet) and a VNet whose subnet uses it. Returns the subnet id."""
    net = clients.network
    found = call_or_none(
        f"read network security group {names.nsg}",
        net.network_security_groups.get,
        names.resource_group,
        names.nsg,
    )
    current = None if found is None else _dict(found)
    rules = {r.get("name"): r for r in ((current or {}).get("properties") or {}).get("securityRules") or ()}
    rule = rules.get(SSH_RULE) or {}
    if (rule.get("properties") or {}).get("sourceAddressPrefix") != ssh_source_cidr:
        others = [r for name, r in rules.items() if name != SSH_RULE]  # rules someone added by hand
        body = nsg_body(names, ssh_source_cidr, others)
        with azure_call(f"create network security group {names.nsg}"):
            net.network_security_groups.begin_create_or_update(names.resource_group, names.nsg, body).result()
    if call_or_none(
        f"read virtual network {names.vnet}", net.virtual_networks.get, names.resource_group, names.vnet
    ):
        return names.subnet_id
    vnet = nm.VirtualNetwork(
        location=names.location,
        tags=names.tags(),
        properties=nm.VirtualNetworkPropertiesFormat(
            address_space=nm.AddressSpace(address_prefixes=[VNET_PREFIX]),
            subnets=[
                nm.Subnet(
                    name=names.subnet,
                    properties=nm.SubnetPropertiesFormat(
                        address_prefix=SUBNET_PREFIX,
                        network_security_group=nm.NetworkSecurityGroup(id=names.nsg_id),
                    ),
                )
            ],
        ),
    )
    with azure_call(f"create virtual network {names.vnet}"):
        net.virtual_networks.begin_create_or_update(names.resource_group, names.vnet, vnet).result()
    return names.subnet_id


# -- scale sets -----------------------------------------------------------------------------------------
def scale_set_body(
    names: WorkspaceNames,
    spec: ClusterSpec,
    *,
    image: str,
    admin_user: str,
    public_key: str,
    setup_script: str,
    os_disk_gb: int = 128,
    managed_identity: bool = True,
) -> cm.VirtualMachineScaleSet:
    """The VMSS PUT body: Uniform, manual upgrades, no overprovisioning, a public IP per instance, the
    workspace's SSH key, node setup as a CustomScript extension whose script (it holds the storage key)
    travels in ``protectedSettings`` — encrypted, never returned by a GET. ``managed_identity``: a
    system-assigned identity, through which the head node scales the set (``grant_scale_set_role``)."""
    script = base64.b64encode(gzip.compress(setup_script.encode("utf-8"))).decode("ascii")
    public_ip = cm.VirtualMachineScaleSetPublicIPAddressConfiguration(
        name="pip",
        # no "sku": the spec lets only Flexible scale sets set the public IP's SKU; on a Uniform one
        # Azure picks it
        properties=cm.VirtualMachineScaleSetPublicIPAddressConfigurationProperties(
            idle_timeout_in_minutes=30, delete_option="Delete"
        ),
    )
    nic = cm.VirtualMachineScaleSetNetworkConfiguration(
        name="nic",
        properties=cm.VirtualMachineScaleSetNetworkConfigurationProperties(
            primary=True,
            ip_configurations=[
                cm.VirtualMachineScaleSetIPConfiguration(
                    name="ipconfig",
                    properties=cm.VirtualMachineScaleSetIPConfigurationProperties(
                        primary=True,
                        # cluster.json's subnet.id, else the workspace's own VNet
                        subnet=cm.ApiEntityReference(id=spec.extra.get("subnet") or names.subnet_id),
                        public_ip_address_configuration=public_ip,
                    ),
                )
            ],
        ),
    )
    setup = cm.VirtualMachineScaleSetExtension(
        name=SETUP_EXTENSION,
        properties=cm.VirtualMachineScaleSetExtensionProperties(
            publisher="Microsoft.Azure.Extensions",
            type="CustomScript",
            type_handler_version="2.1",
            auto_upgrade_minor_version=True,
            settings={},
            protected_settings={"script": script},
        ),
    )
    profile = cm.VirtualMachineScaleSetVMProfile(
        os_profile=cm.VirtualMachineScaleSetOSProfile(
            computer_name_prefix=computer_name_prefix(spec.name),
            admin_username=admin_user,
            linux_configuration=cm.LinuxConfiguration(
                disable_password_authentication=True,
                ssh=cm.SshConfiguration(
                    public_keys=[
                        cm.SshPublicKey(path=f"/home/{admin_user}/.ssh/authorized_keys", key_data=public_key)
                    ]
                ),
            ),
        ),
        storage_profile=cm.VirtualMachineScaleSetStorageProfile(
            image_reference=cm.ImageReference(**parse_image(image)),
            os_disk=cm.VirtualMachineScaleSetOSDisk(
                create_option="FromImage",
                caching="ReadWrite",
                disk_size_gb=os_disk_gb,
                managed_disk=cm.VirtualMachineScaleSetManagedDiskParameters(
                    storage_account_type="StandardSSD_LRS"
                ),
            ),
        ),
        network_profile=cm.VirtualMachineScaleSetNetworkProfile(network_interface_configurations=[nic]),
        extension_profile=cm.VirtualMachineScaleSetExtensionProfile(extensions=[setup]),
    )
    if spec.vm_priority is VmPriority.LOWPRIORITY:
        profile.priority = "Spot"
        profile.eviction_policy = "Delete"
        profile.billing_profile = cm.BillingProfile(max_price=-1)
    else:
        profile.priority = "Regular"
    body = cm.VirtualMachineScaleSet(
        location=names.location,
        tags=names.tags(spec.name),
        sku=cm.Sku(name=spec.vm_size, tier="Standard", capacity=spec.nodes),
        properties=cm.VirtualMachineScaleSetProperties(
            orchestration_mode="Uniform",
            upgrade_policy=cm.UpgradePolicy(mode="Manual"),
            overprovision=False,
            single_placement_group=single_placement_group(spec),
            virtual_machine_profile=profile,
        ),
    )
    if managed_identity:
        body.identity = cm.VirtualMachineScaleSetIdentity(type="SystemAssigned")
    return body


PLACEMENT_GROUP_MAX = 100  # VMs in one placement group


def max_nodes(spec: ClusterSpec) -> int:
    """The most VMs the cluster may ever have: ``max_nodes`` with autoscale, else its size."""
    return spec.autoscale.max_nodes if spec.autoscale is not None else spec.nodes


def single_placement_group(spec: ClusterSpec) -> bool:
    """``singlePlacementGroup`` of the scale set, from the most nodes it may ever have.

    True while that is at most 100: one placement group is what lets InfiniBand (the ``r`` sizes such as
    ``Standard_ND96isr_H100_v5``) connect every node of a multi-node NCCL job, since RDMA does not cross
    placement groups; and a scale set can later be switched from true to false but never back. False
    when ``max_nodes`` is above 100, where a single group cannot hold the cluster (ARM refuses a
    capacity above 100 with it). Decided from ``max_nodes``, not the initial size: an autoscale cluster
    created at 0 nodes may grow to its maximum without the client.
    """
    return max_nodes(spec) <= PLACEMENT_GROUP_MAX


# -- the scale set's own identity: scale-down without the client (docs/azure.md, "Autoscale") ----------
# Virtual Machine Contributor (built-in role id), granted on the scale set's own resource id only.
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
ROLE_ATTEMPTS = 4  # a just-created identity may not have reached the directory yet (PrincipalNotFound)


def scale_set_id(names: WorkspaceNames, vmss: str) -> str:
    return (
        f"/subscriptions/{names.subscription_id}/resourceGroups/{names.resource_group}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{vmss}"
    )


def role_definition_id(names: WorkspaceNames, role: str = VM_CONTRIBUTOR) -> str:
    return f"/subscriptions/{names.subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role}"


def role_assignment_name(scope: str, principal_id: str, role: str = VM_CONTRIBUTOR) -> str:
    """A GUID derived from scope, principal and role: the same grant has the same name on every call."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"batchai:{scope.lower()}|{principal_id}|{role}"))


def scale_set_principal(clients: AzureClients, names: WorkspaceNames, vmss: str) -> str | None:
    """The principal id of the scale set's system-assigned identity (None: no identity or no set)."""
    found = get_scale_set(clients, names, vmss)
    identity = (found or {}).get("identity") or {}
    principal = identity.get("principal_id") or identity.get("principalId")
    return str(principal) if principal else None


def grant_scale_set_role(
    clients: AzureClients, names: WorkspaceNames, vmss: str, *, retry_delay: float = 5.0
) -> bool:
    """Give the scale set's identity Virtual Machine Contributor on that scale set only, so that its
    head node can delete instances and change capacity with no client up. Idempotent.

    Returns False (and logs why) when the caller may not assign roles (it needs Owner or User Access
    Administrator on the scale set: ``AuthorizationFailed``) or the set has no identity; the cluster then
    scales only from the client. Other failures raise AzureError.
    """
    principal = scale_set_principal(clients, names, vmss)
    if principal is None:
        log.warning("scale set %s has no managed identity: it cannot scale itself down", vmss)
        return False
    scope = scale_set_id(names, vmss)
    body = am.RoleAssignmentCreateParameters(
        role_definition_id=role_definition_id(names),
        principal_id=principal,
        principal_type="ServicePrincipal",  # no directory lookup: a new identity works at once
        description=f"batchai_sdk: cluster {vmss} scales itself (workspace {names.workspace})",
    )
    name = role_assignment_name(scope, principal)
    for attempt in range(ROLE_ATTEMPTS):
        try:
            with azure_call(f"grant scale set {vmss}'s identity Virtual Machine Contributor on it"):
                clients.authorization.role_assignments.create(scope, name, body)
            return True
        except AzureError as exc:
            if exc.code == "RoleAssignmentExists":
                return True
            if exc.code in ("AuthorizationFailed", "LinkedAuthorizationFailed"):
                log.warning(
                    "cluster %s cannot scale itself down: %s (assigning roles needs Owner or User Access "
                    "Administrator on the scale set); it scales only from the client",
                    vmss,
                    exc,
                )
                return False
            if exc.code == "PrincipalNotFound" and attempt < ROLE_ATTEMPTS - 1:
                time.sleep(retry_delay)
                continue
            raise
    return False  # pragma: no cover - the loop returns or raises


def revoke_scale_set_role(clients: AzureClients, names: WorkspaceNames, vmss: str) -> None:
    """Remove the grant of ``grant_scale_set_role`` (before deleting the scale set: ARM keeps role
    assignments of deleted resources). No error when there is none."""
    principal = scale_set_principal(clients, names, vmss)
    if principal is None:
        return
    scope = scale_set_id(names, vmss)
    call_or_none(
        f"remove the role of scale set {vmss}'s identity",
        clients.authorization.role_assignments.delete,
        scope,
        role_assignment_name(scope, principal),
    )


def get_scale_set(clients: AzureClients, names: WorkspaceNames, vmss: str) -> dict[str, Any] | None:
    found = call_or_none(
        f"read scale set {vmss}", clients.compute.virtual_machine_scale_sets.get, names.resource_group, vmss
    )
    return None if found is None else _dict(found)


def begin_create_scale_set(
    clients: AzureClients, names: WorkspaceNames, vmss: str, body: cm.VirtualMachineScaleSet
) -> Any:
    with azure_call(f"create scale set {vmss}"):
        return clients.compute.virtual_machine_scale_sets.begin_create_or_update(
            names.resource_group, vmss, body
        )


def begin_resize_scale_set(
    clients: AzureClients,
    names: WorkspaceNames,
    vmss: str,
    capacity: int,
    *,
    current: Mapping[str, Any] | None = None,
) -> Any:
    """PATCH the capacity. Past 100 VMs a scale set in one placement group (``current``: its GET) is
    switched to several in the same PATCH — ARM allows true → false, never back (docs/azure.md)."""
    body = cm.VirtualMachineScaleSetUpdate(sku=cm.Sku(capacity=capacity))
    single = ((current or {}).get("properties") or {}).get("singlePlacementGroup")
    if capacity > PLACEMENT_GROUP_MAX and single is not False:
        body.properties = cm.VirtualMachineScaleSetUpdateProperties(single_placement_group=False)
    with azure_call(f"resize scale set {vmss} to {capacity}"):
        return clients.compute.virtual_machine_scale_sets.begin_update(names.resource_group, vmss, body)


def begin_delete_scale_set(clients: AzureClients, names: WorkspaceNames, vmss: str) -> Any | None:
    """Start deleting the scale set (its VMs, NICs, public IPs and OS disks go with it); None if gone."""
    return call_or_none(
        f"delete scale set {vmss}",
        clients.compute.virtual_machine_scale_sets.begin_delete,
        names.resource_group,
        vmss,
    )


def list_scale_sets(clients: AzureClients, names: WorkspaceNames) -> list[dict[str, Any]]:
    found = call_or_none(
        f"list scale sets of {names.resource_group}",
        lambda: [_dict(s) for s in clients.compute.virtual_machine_scale_sets.list(names.resource_group)],
    )
    return found or []


def list_instances(clients: AzureClients, names: WorkspaceNames, vmss: str) -> list[dict[str, Any]]:
    """The scale set's VMs with their instance views (paged by nextLink)."""
    vms = clients.compute.virtual_machine_scale_set_vms
    found = call_or_none(
        f"list the instances of scale set {vmss}",
        lambda: [_dict(vm) for vm in vms.list(names.resource_group, vmss, expand="instanceView")],
    )
    return found or []


def list_addresses(
    clients: AzureClients, names: WorkspaceNames, vmss: str
) -> dict[str, tuple[str | None, str | None]]:
    """VM resource id (lower case) → (private IP, public IP) of its primary NIC."""
    net = clients.network
    with azure_call(f"list the network interfaces of scale set {vmss}"):
        nics = [
            _dict(n)
            for n in net.network_interfaces.list_virtual_machine_scale_set_network_interfaces(
                names.resource_group, vmss
            )
        ]
        pips = [
            _dict(p)
            for p in net.public_ip_addresses.list_virtual_machine_scale_set_public_ip_addresses(
                names.resource_group, vmss
            )
        ]
    public_by_ipconfig = {}
    for pip in pips:
        props = pip.get("properties") or {}
        ipconfig = (props.get("ipConfiguration") or {}).get("id")
        if ipconfig and props.get("ipAddress"):
            public_by_ipconfig[ipconfig.lower()] = str(props["ipAddress"])
    out: dict[str, tuple[str | None, str | None]] = {}
    for nic in nics:
        props = nic.get("properties") or {}
        vm_id = (props.get("virtualMachine") or {}).get("id")
        if not vm_id:
            continue
        configs = props.get("ipConfigurations") or []
        primary = next(
            (c for c in configs if (c.get("properties") or {}).get("primary")),
            configs[0] if configs else None,
        )
        if primary is None:
            continue
        private = (primary.get("properties") or {}).get("privateIPAddress")
        public = public_by_ipconfig.get(str(primary.get("id") or "").lower())
        out[vm_id.lower()] = (str(private) if private else None, public)
    return out


def delete_workspace_resources(
    clients: AzureClients, names: WorkspaceNames, *, timeout: float | None
) -> None:
    """For a resource group this workspace did not create: delete only what carries its tag."""
    pollers = []
    for vmss in list_scale_sets(clients, names):
        if (vmss.get("tags") or {}).get(TAG_WORKSPACE) == names.workspace:
            poller = begin_delete_scale_set(clients, names, str(vmss["name"]))
            if poller is not None:
                pollers.append(poller)
    for poller in pollers:
        _wait(poller, "delete scale set", timeout)
    steps = [
        ("virtual network", names.vnet, clients.network.virtual_networks),
        ("network security group", names.nsg, clients.network.network_security_groups),
    ]
    for what, name, ops in steps:
        poller = call_or_none(f"delete {what} {name}", ops.begin_delete, names.resource_group, name)
        if poller is not None:
            _wait(poller, f"delete {what} {name}", timeout)
    accounts = clients.storage.storage_accounts
    account = read_storage_account(clients, names)
    if account is not None and (_dict(account).get("tags") or {}).get(TAG_WORKSPACE) == names.workspace:
        call_or_none(
            f"delete storage account {names.storage_account}",
            accounts.delete,
            names.resource_group,
            names.storage_account,
        )


def _wait(poller: Any, operation: str, timeout: float | None) -> Any:
    """Wait for a long-running operation (at most ``timeout`` seconds); its failure becomes AzureError."""
    with azure_call(operation):
        poller.wait(timeout)
        if poller.done():
            return poller.result()
    return None
