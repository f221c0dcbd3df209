"""The Azure backend: a resource group with a storage account, a file share and a network; clusters are
VM scale sets. Once the VMs exist, jobs run through the SSH backend's execution path: the head node is
reached at its public address, the other nodes through it on their private addresses, with host keys
pinned through ARM (host_key_pins.py) instead of trusted on first use.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import threading
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import paramiko

from ... import _layout as layout
from ..._models import ClusterSpec, Node, NodeState, VmPriority
from ...exceptions import NodeError, ValidationError
from ...mounts import Mount
from ...remote.base import Runner
from ...remote.host_keys import HostKeyStore, known_hosts_name
from ...remote.ssh import SSHRunner
from ..base import Backend, ClusterStatus, LaunchTarget
from ..local import default_root
from ..ssh import SSHBackend
from ..ssh import keys as ssh_keys
from ..ssh.backend import save_cluster_secrets
from . import _sdk
from . import provision as prov
from .clients import AzureClients, ClientOptions
from .errors import azure_call
from .host_key_pins import HostKeyPins, Instance, fetch_host_key
from .models import cm
from .node_setup import NodeEnvironment, setup_script
from .preflight import SkuInfo, list_skus, preflight
from .share import AzureFileShare
from .states import cluster_status_from_raw

log = logging.getLogger(__name__)

_RG_RE = re.compile(r"^[-\w._()]{1,90}$")
_LOCATION_RE = re.compile(r"^[a-z0-9]{2,40}$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class AzureInstance:
    """One VM of a scale set as the backend sees it."""

    instance_id: str
    name: str  # "<vmss>_<instanceId>": the node id
    vm_id: str
    computer_name: str
    private_ip: str | None
    public_ip: str | None


AddressResolver = Callable[[AzureInstance], tuple[str, int]]


def detect_public_address(timeout: float = 5.0) -> str:
    """This client's public IPv4 address as the internet sees it (asks https://api.ipify.org)."""
    with urllib.request.urlopen("https://api.ipify.org", timeout=timeout) as response:
        text = response.read(64).decode("ascii", "replace").strip()
    return str(ipaddress.ip_address(text))


class AzureBackend(Backend):
    """Workspace resources in one resource group; see docs/azure.md for what is created and why.

    ``node_env`` says where things are on the nodes (the defaults match the node setup of this
    package); ``node_address_resolver`` maps an instance to the (host, port) this client connects to
    for SSH (default: its public IP and ``ssh_port``).
    """

    kind = "azure"
    engine: ClassVar[str] = "vmss"  # what runs the clusters (AzureBatchBackend: "batch")
    provisions_lazily = True

    def __init__(
        self,
        name: str,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        location: str | None = None,
        credential: Any | None = None,
        *,
        storage_account: str | None = None,
        share_name: str = "batchaishare",
        ssh_source_cidr: str | None = None,
        client_address: Callable[[], str] | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        admin_user: str = "azureuser",
        ssh_user: str | None = None,
        ssh_options: Mapping[str, Any] | None = None,
        image: str = prov.DEFAULT_IMAGE,
        install_stack: bool = True,
        node_env: NodeEnvironment | None = None,
        ssh_port: int = 22,
        tcp_interface: str | None = "eth0",
        polling_interval: float | None = None,
        retry_total: int | None = None,
        retry_backoff_factor: float | None = None,
        connect_timeout: float = 10.0,
        base_url: str | None = None,
        file_endpoint: str | None = None,
        share_retry_total: int = 5,
        share_retry_backoff: float = 2.0,
        max_concurrency: int = 4,
        node_address_resolver: AddressResolver | None = None,
        host_key_fetcher: Callable[[str, str], paramiko.PKey] | None = None,
        client_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if (
            not isinstance(resource_group, str)
            or not _RG_RE.match(resource_group)
            or resource_group.endswith(".")
        ):
            raise ValidationError(
                "resource_group", resource_group, "1-90 letters, digits, '-', '_', '.', '(' or ')'"
            )
        if not isinstance(location, str) or not _LOCATION_RE.match(location.replace(" ", "").lower()):
            raise ValidationError("location", location, "an Azure region such as 'eastus'")
        if not _USER_RE.match(admin_user or "") or admin_user in ("root", "admin", "administrator"):
            raise ValidationError("admin_user", admin_user, "a Linux user name other than root/admin")
        if isinstance(ssh_port, bool) or not isinstance(ssh_port, int) or not 0 < ssh_port < 65536:
            raise ValidationError("ssh_port", ssh_port, "a TCP port 1-65535")
        prov.parse_image(image)
        _sdk.core_exceptions()  # MissingExtraError now, not at the first call
        self.workspace = name
        self.options = ClientOptions(
            base_url=base_url or ClientOptions.base_url,
            polling_interval=polling_interval,
            retry_total=retry_total,
            retry_backoff_factor=retry_backoff_factor,
            connect_timeout=connect_timeout,
            extra=dict(client_kwargs or {}),
        )
        self.clients = AzureClients(credential, subscription_id, self.options)
        self.names = prov.WorkspaceNames(
            workspace=name,
            subscription_id=self.clients.subscription_id,
            resource_group=resource_group,
            location=location.replace(" ", "").lower(),
            storage_account=prov.validate_storage_account(
                storage_account
                or prov.storage_account_name(name, self.clients.subscription_id, resource_group)
            ),
            share=prov.validate_share_name(share_name),
        )
        self.ssh_source_cidr = prov.validate_cidr(ssh_source_cidr) if ssh_source_cidr else None
        self._client_address = client_address or detect_public_address
        self.state_dir = (
            Path(state_dir).expanduser() if state_dir is not None else default_root() / "azure" / name
        )
        self.admin_user = admin_user
        self.ssh_user = ssh_user or admin_user
        self.ssh_options = dict(ssh_options or {})
        self.image = image
        self.install_stack = install_stack
        self.node_env = node_env or NodeEnvironment()
        self.ssh_port = ssh_port
        self.tcp_interface = tcp_interface
        self.connect_timeout = connect_timeout
        self.file_endpoint = file_endpoint
        self.share_retry_total = share_retry_total
        self.share_retry_backoff = share_retry_backoff
        self.max_concurrency = max_concurrency
        self._resolve = node_address_resolver or self._default_address
        self._fetch_host_key = host_key_fetcher or self._host_key_via_run_command
        self.pins = HostKeyPins(self.state_dir)
        self.host_keys = HostKeyStore(self.pins.known_hosts)
        self._lock = threading.RLock()
        self._share: AzureFileShare | None = None
        self._account_key: str | None = None
        self._created_group: bool | None = None
        self._network_ready = False
        self._pending: dict[str, Any] = {}  # cluster → LRO poller of its last create/resize
        self._instances: dict[str, dict[str, AzureInstance]] = {}  # cluster → node id → instance
        self._addresses: dict[str, tuple[str, str | None, str | None]] = {}  # VM id → (vmId, private, public)
        self._unreachable: dict[str, dict[str, str]] = {}  # cluster → node id → reason
        self._ssh: dict[str, tuple[tuple[Any, ...], SSHBackend]] = {}
        self._skus: Mapping[str, SkuInfo] | None = None  # the region's VM sizes (preflight), read once

    def __repr__(self) -> str:
        return (
            f"AzureBackend({self.workspace!r}, resource_group={self.names.resource_group!r}, "
            f"location={self.names.location!r})"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "workspace": self.workspace,
            "share": self.names.share,
            "subscription_id": self.names.subscription_id,
            "resource_group": self.names.resource_group,
            "location": self.names.location,
            "storage_account": self.names.storage_account,
            "state_dir": str(self.state_dir),
        }

    # -- workspace resources ------------------------------------------------------------------------------
    def provision(self) -> None:
        """Create or reuse the resource group, the storage account and the share (idempotent)."""
        with self._lock:
            if self._share is not None:
                return
            self._created_group = prov.ensure_resource_group(self.clients, self.names)
            key = prov.ensure_storage_account(self.clients, self.names)
            share = AzureFileShare.from_account_key(
                self.names.storage_account,
                key,
                self.names.share,
                endpoint=self.file_endpoint,
                max_concurrency=self.max_concurrency,
                retry_total=self.share_retry_total,
                retry_initial_backoff=self.share_retry_backoff,
                retry_increment_base=self.share_retry_backoff * 2,
                retry_jitter=min(1.0, self.share_retry_backoff),
                connect_timeout=self.connect_timeout,
                **self.options.extra,
            )
            share.create()
            self._account_key = key
            self._share = share

    @property
    def share(self) -> AzureFileShare:  # type: ignore[override]  # provisioned lazily, read-only
        """The workspace's Azure file share (provisioned on first use)."""
        self.provision()
        assert self._share is not None
        return self._share

    def _secrets(self) -> tuple[str, ...]:
        return (self._account_key,) if self._account_key else ()

    def _ssh_cidr(self) -> str:
        if self.ssh_source_cidr is None:
            try:
                address = self._client_address()
            except Exception as exc:
                raise ValidationError(
                    "ssh_source_cidr",
                    None,
                    "the address or CIDR that may reach the nodes by SSH, e.g. '203.0.113.7/32' "
                    f"(this client's public address could not be detected: {exc})",
                ) from exc
            self.ssh_source_cidr = prov.validate_cidr(address)
        return self.ssh_source_cidr

    def _ensure_network(self) -> str:
        with self._lock:
            subnet = prov.ensure_network(self.clients, self.names, self._ssh_cidr())
            self._network_ready = True
            return subnet

    def ssh_key(self) -> ssh_keys.ClusterKey:
        """The workspace's SSH key pair (ed25519, private half 0600 in the state directory)."""
        path = self.state_dir / "id_ed25519"
        comment = f"batchai-workspace:{self.workspace}"
        with self._lock:
            key = ssh_keys.load(path, comment)
            if key is None:
                key = ssh_keys.generate(comment)
                ssh_keys.save(path, key)
            return key

    # -- clusters ------------------------------------------------------------------------------------------
    def _vmss(self, spec: ClusterSpec) -> str:
        return spec.name

    def scale_set(self, spec: ClusterSpec) -> dict[str, str] | None:
        return {
            "subscription": self.names.subscription_id,
            "resource_group": self.names.resource_group,
            "vmss": self._vmss(spec),
        }

    def check_cluster(self, spec: ClusterSpec, *, in_use: int | None = None) -> SkuInfo:
        """Preflight, creating nothing: the VM size is offered to the subscription in the region, and the
        regional and family vCPU quotas (the Spot quota for low priority) leave room for the cluster at
        its largest (``max_nodes`` with autoscale). Raises ``SkuNotAvailableError`` / ``QuotaShortError``
        (both ``AzureQuotaError``); returns the size's vCPUs, GPUs and quota family.

        ``in_use``: the cluster's VMs that exist (Azure's usage counts them already); None reads the
        scale set's capacity."""
        if in_use is None:
            current = prov.get_scale_set(self.clients, self.names, self._vmss(spec))
            in_use = int(((current or {}).get("sku") or {}).get("capacity") or 0)
        with self._lock:
            skus = self._skus
        if skus is None:  # once per session: a region's list is large and changes rarely
            skus = list_skus(self.clients, self.names.location)
            with self._lock:
                self._skus = skus
        return preflight(
            self.clients,
            size=spec.vm_size,
            region=self.names.location,
            max_nodes=prov.max_nodes(spec),
            priority=spec.vm_priority,
            in_use=in_use,
            skus=skus,
        )

    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        """Start creating the scale set (returns once ARM accepted it; with ``timeout``, waits for it).
        The preflight (``check_cluster``) runs first: a size or quota Azure would refuse is refused
        before the resource group, storage or network is touched."""
        self.check_cluster(spec, in_use=0)
        self.provision()
        install = spec.extra.get("install_stack", self.install_stack)
        if not isinstance(install, bool):
            raise ValidationError("install_stack", install, "True or False")
        disk = spec.extra.get("os_disk_gb", 128)
        if isinstance(disk, bool) or not isinstance(disk, int) or not 30 <= disk <= 4095:
            raise ValidationError("os_disk_gb", disk, "an integer from 30 to 4095")
        self._ensure_network()
        # node_setup (and a job's mounts) run over SSH: the secrets live with the SSH state
        save_cluster_secrets(self.state_dir / "ssh" / "clusters" / spec.name, spec)
        assert self._account_key is not None
        script = setup_script(
            account=self.names.storage_account,
            account_key=self._account_key,
            share=self.names.share,
            admin_user=self.admin_user,
            env=self.node_env,
            install_stack=install,
            mounts=spec.mounts,
        )
        body = prov.scale_set_body(
            self.names,
            spec,
            image=spec.image or self.image,
            admin_user=self.admin_user,
            public_key=self.ssh_key().public_line,
            setup_script=script,
            os_disk_gb=disk,
        )
        poller = prov.begin_create_scale_set(self.clients, self.names, self._vmss(spec), body)
        prov.grant_scale_set_role(self.clients, self.names, self._vmss(spec))  # it scales itself down
        self._track(spec, poller, timeout, f"create scale set {spec.name}")

    def _track(self, spec: ClusterSpec, poller: Any, timeout: float | None, operation: str) -> None:
        with self._lock:
            self._pending[spec.name] = (poller, operation)
        if timeout is not None:
            with azure_call(operation, secrets=self._secrets()):
                poller.wait(timeout)
                if poller.done():
                    self._pending.pop(spec.name, None)
                    poller.result()

    def _raise_failed_operation(self, cluster: str) -> None:
        """A create/resize that ARM accepted but then failed: raised once, then forgotten."""
        with self._lock:
            entry = self._pending.get(cluster)
            if entry is None or not entry[0].done():
                return
            self._pending.pop(cluster, None)
        poller, operation = entry
        with azure_call(operation, secrets=self._secrets()):
            poller.result()

    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        """Grow by raising the capacity; shrink by deleting chosen instances — unusable ones first, then
        those no job holds, so a shrink does not kill a running job's node when an idle one can go."""
        vmss = self._vmss(spec)
        current = prov.get_scale_set(self.clients, self.names, vmss)
        if current is None:
            if nodes > 0:
                self.create_cluster(replace(spec, nodes=nodes), timeout=timeout)
            return
        status = self.cluster_status(spec)
        live = [n for n in status.nodes if status.node_states.get(n.id) is not NodeState.LEAVING]
        if nodes >= len(live):
            if nodes > len(live):  # the quota for the VMs to add, before Azure refuses them
                self.check_cluster(replace(spec, nodes=nodes, autoscale=None), in_use=len(live))
            poller = prov.begin_resize_scale_set(self.clients, self.names, vmss, nodes, current=current)
            self._track(spec, poller, timeout, f"resize scale set {vmss} to {nodes}")
            return
        claimed = self._claimed(spec.name)
        instances = self._instances.get(spec.name, {})

        def order(node: Node) -> tuple[bool, bool, int]:
            iid = instances[node.id].instance_id if node.id in instances else ""
            # unusable or still preparing first, then unclaimed, then the newest
            return (node.id not in status.node_states, node.id in claimed, -int(iid) if iid.isdigit() else 0)

        victims = [
            instances[n.id].instance_id
            for n in sorted(live, key=order)[: len(live) - nodes]
            if n.id in instances
        ]
        with azure_call(f"remove {len(victims)} instance(s) of scale set {vmss}", secrets=self._secrets()):
            poller = self.clients.compute.virtual_machine_scale_sets.begin_delete_instances(
                self.names.resource_group,
                vmss,
                cm.VirtualMachineScaleSetVMInstanceRequiredIDs(instance_ids=victims),
            )
        self._track(spec, poller, timeout, f"resize scale set {vmss} to {nodes}")

    def simulate_eviction(self, spec: ClusterSpec, node: str) -> bool:
        """Azure's own eviction of a Spot VM (``POST .../virtualMachines/{instanceId}/simulateEviction``):
        the VM gets the Scheduled Events ``Preempt`` notice, then is deleted (eviction policy Delete). Only
        Spot VMs can be evicted: on a dedicated cluster this returns False and the caller leaves a
        simulated notice on the share instead."""
        if spec.vm_priority is not VmPriority.LOWPRIORITY:
            return False
        if node not in self._instances.get(spec.name, {}):
            self.cluster_status(spec)
        inst = self._instance(spec.name, Node(id=node, address="", machine=node))
        vmss = self._vmss(spec)
        with azure_call(f"simulate the eviction of {node} (scale set {vmss}, instance {inst.instance_id})"):
            self.clients.compute.virtual_machine_scale_set_vms.simulate_eviction(
                self.names.resource_group, vmss, inst.instance_id
            )
        return True

    def _claimed(self, cluster: str) -> set[str]:
        """Nodes a job holds, as the cluster's scheduler published them."""
        try:
            doc = self.share.read_json_or_none(layout.SHARE.nodes_record(cluster)) or {}
        except Exception:  # nothing readable: treat every node alike
            return set()
        return set(doc.get("nodes") or {})

    def delete_cluster(self, spec: ClusterSpec) -> None:
        """Start deleting the scale set — its VMs, NICs, public IPs and OS disks go with it; the
        workspace's network and share stay. No error when it is already gone."""
        prov.revoke_scale_set_role(self.clients, self.names, self._vmss(spec))  # ARM would keep it
        prov.begin_delete_scale_set(self.clients, self.names, self._vmss(spec))
        with self._lock:
            self._pending.pop(spec.name, None)
            gone = self._instances.pop(spec.name, {})
            self._unreachable.pop(spec.name, None)
            entry = self._ssh.pop(spec.name, None)
        if entry is not None:
            entry[1].close()
        self.pins.forget(i.vm_id for i in gone.values())
        shutil.rmtree(self.state_dir / "ssh" / "clusters" / spec.name, ignore_errors=True)

    def _default_address(self, instance: AzureInstance) -> tuple[str, int]:
        address = instance.public_ip or instance.private_ip
        if not address:
            raise NodeError("resolving node addresses", {instance.name: "the VM has no IP address yet"})
        return address, self.ssh_port

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        self._raise_failed_operation(spec.name)
        vmss = self._vmss(spec)
        scale_set = prov.get_scale_set(self.clients, self.names, vmss)
        raw = prov.list_instances(self.clients, self.names, vmss) if scale_set is not None else []

        # Addresses are cached per VM (a VM keeps its NIC); a new VM under an old resource id is looked up.
        def known(vm: dict[str, Any]) -> bool:
            cached = self._addresses.get(str(vm.get("id", "")).lower())
            vm_id = str((vm.get("properties") or {}).get("vmId") or "")
            return cached is not None and cached[0] == vm_id and cached[1] is not None

        live = [
            vm
            for vm in raw
            if str((vm.get("properties") or {}).get("provisioningState", "")).lower() != "deleting"
        ]
        if not all(known(vm) for vm in live):
            found = prov.list_addresses(self.clients, self.names, vmss)
            for vm in raw:
                rid = str(vm.get("id", "")).lower()
                if rid in found:
                    vm_id = str((vm.get("properties") or {}).get("vmId") or "")
                    self._addresses[rid] = (vm_id, *found[rid])
        instances: dict[str, AzureInstance] = {}
        pairs = []
        for vm in raw:
            props = vm.get("properties") or {}
            _, private, public = self._addresses.get(str(vm.get("id", "")).lower(), ("", None, None))
            inst = AzureInstance(
                instance_id=str(vm.get("instanceId") or str(vm.get("id", "")).rsplit("/", 1)[-1]),
                name=str(vm.get("name") or f"{vmss}_{vm.get('instanceId')}"),
                vm_id=str(props.get("vmId") or vm.get("id")),
                computer_name=str((props.get("osProfile") or {}).get("computerName") or vm.get("name")),
                private_ip=private,
                public_ip=public,
            )
            instances[inst.name] = inst
            pairs.append((self._node_of(inst), vm))
        with self._lock:
            self._instances[spec.name] = instances
            unreachable = dict(self._unreachable.get(spec.name, {}))
        return cluster_status_from_raw(scale_set, pairs, unreachable=unreachable, secrets=self._secrets())

    # -- jobs ----------------------------------------------------------------------------------------------
    def _instance(self, cluster: str, node: Node) -> AzureInstance:
        inst = self._instances.get(cluster, {}).get(node.id)
        if inst is None:
            raise NodeError("finding the node's VM", {node.id: "not an instance of the scale set (any more)"})
        return inst

    def _ssh_backend(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> SSHBackend:
        """The SSH backend for the cluster's current machines: private addresses, the head's public
        address as the jump host, the host keys pinned through ARM."""
        if not self._instances.get(spec.name):
            self.cluster_status(spec)
        cluster_nodes = [self._node_of(i) for i in self._instances.get(spec.name, {}).values()]
        hosts = list(
            dict.fromkeys([n.address for n in nodes] + [n.address for n in cluster_nodes if n.address])
        )
        head_host, head_port = self._resolve(self._instance(spec.name, nodes[0]))
        jump = f"{self.ssh_user}@{head_host}:{head_port}"
        signature = (tuple(hosts), jump)
        with self._lock:
            entry = self._ssh.get(spec.name)
            if entry is not None and entry[0] == signature:
                return entry[1]
            if entry is not None:
                entry[1].close()
            options: dict[str, Any] = {
                "python": self.node_env.python,
                "mpirun": self.node_env.mpirun,
                "state_dir": self.state_dir / "ssh",
                "tcp_interface": self.tcp_interface,
                "mpi_args": (("--prefix", self.node_env.mpi_prefix) if self.node_env.mpi_prefix else ())
                + self.node_env.mpi_args,
                "env": {"PATH": self.node_env.path} if self.node_env.path else None,
                "connect_timeout": self.connect_timeout,
                **self.ssh_options,
            }
            backend = SSHBackend(
                self.workspace,
                hosts=hosts,
                user=self.ssh_user,
                key_file=self.state_dir / "id_ed25519",
                share_path=self.node_env.share_path(self.names.share),
                port=self.ssh_port,
                known_hosts=self.host_keys.path,
                jump_host=jump,
                **options,
            )
            self._ssh[spec.name] = (signature, backend)
            return backend

    @staticmethod
    def _node_of(inst: AzureInstance) -> Node:
        return Node(
            id=inst.name,
            address=inst.private_ip or inst.public_ip or "",
            machine=inst.computer_name,
            private_address=inst.private_ip,
        )

    def _host_key_via_run_command(self, vmss: str, instance_id: str) -> paramiko.PKey:
        return fetch_host_key(self.clients, self.names.resource_group, vmss, instance_id)

    def pin_host_keys(self, spec: ClusterSpec) -> None:
        """Pin the host key of every instance of the cluster (fetched through ARM where not pinned yet)
        under each name it is reached by: its private address and the client's address for it."""
        instances = list(self._instances.get(spec.name, {}).values())
        wanted = []
        for inst in instances:
            if not inst.private_ip and not inst.public_ip:
                continue
            names = []
            if inst.private_ip:
                names.append(known_hosts_name(inst.private_ip, self.ssh_port))
            names.append(known_hosts_name(*self._resolve(inst)))
            wanted.append(
                Instance(vm_id=inst.vm_id, instance_id=inst.instance_id, names=tuple(dict.fromkeys(names)))
            )
        self.pins.pin(wanted, lambda i: self._fetch_host_key(self._vmss(spec), i.instance_id))

    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """Host keys pinned through ARM, the SSH rule admitting this client, then the SSH backend's
        preparation: every node answers, sees the share, has the cluster key and its node setup."""
        if not nodes:
            return
        if not self._instances.get(spec.name):
            self.cluster_status(spec)
        if not self._network_ready:
            self._ensure_network()
        for node in nodes:
            self._instance(spec.name, node)
        self.pin_host_keys(spec)
        try:
            self._ssh_backend(spec, nodes).prepare(spec, nodes)
        except NodeError as exc:
            with self._lock:
                memo = self._unreachable.setdefault(spec.name, {})
                for nid, why in exc.failures.items():
                    if "connect" in exc.operation or "unreachable" in why or "cannot connect" in why:
                        memo[nid] = why
                for nid in exc.succeeded:
                    memo.pop(nid, None)
            raise
        with self._lock:
            memo = self._unreachable.get(spec.name, {})
            for node in nodes:
                memo.pop(node.id, None)

    def prepare_job_mounts(self, spec: ClusterSpec, nodes: tuple[Node, ...], mounts: Sequence[Mount]) -> None:
        """A job's own mounts: as on the SSH backend, over SSH as the admin user (passwordless sudo)."""
        if nodes:
            self._ssh_backend(spec, nodes).prepare_job_mounts(spec, nodes, mounts)

    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        target = self._ssh_backend(spec, nodes).launch_target(spec, nodes)
        return replace(target, temp_root=self.node_env.temp_root)

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> Runner:
        """A new SSH connection to the head node at the address this client reaches it by."""
        host, port = self._resolve(self._instance(spec.name, nodes[0]))
        return SSHRunner(
            host,
            host_keys=self.host_keys,
            user=self.ssh_user,
            port=port,
            key_file=self.state_dir / "id_ed25519",
            node=nodes[0].id,
            connect_timeout=self.connect_timeout,
        )

    # -- workspace removal -------------------------------------------------------------------------------
    def delete(self, *, timeout: float | None = None) -> None:
        """Remove the resource group when this workspace created it; in a group it found, remove only
        the resources tagged with the workspace. Then forget the local state (keys, pinned host keys)."""
        with self._lock:
            if self._created_group is None:
                group = prov.get_resource_group(self.clients, self.names)
                tags = (group or {}).get("tags") or {}
                self._created_group = group is None or tags.get(prov.TAG_CREATED_BY) == self.workspace
            created = self._created_group
        if created:
            prov.delete_resource_group(self.clients, self.names, timeout=timeout)
        else:
            prov.delete_workspace_resources(self.clients, self.names, timeout=timeout)
        self.close()
        with self._lock:
            self._share = None
            self._account_key = None
            self._network_ready = False
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            entries = list(self._ssh.values())
            self._ssh.clear()
        for _, backend in entries:
            backend.close()
        with self._lock:
            share, self._share = self._share, None
        if share is not None:
            share.close()
        self.clients.close()
