"""Azure Batch as the engine of an Azure workspace: ``Workspace.azure(..., engine="batch")``.

The workspace's resource group, storage account and file share are the VM-scale-set engine's
(``AzureBackend``, reused as the base class: provisioning, the VM-size preflight, the share, the
secrets scrubbing); what differs is who runs the clusters. Here a cluster is a Batch pool in a Batch
account of the resource group, and a job is a Batch job with one multi-instance task: the Batch service
queues, places, grows and shrinks (autoscale formula), requeues tasks of preempted Spot nodes and keeps
the task's identity. There is no head-node scheduler of ours, no SSH from this client to the nodes and no
network of ours: the service reaches its nodes itself. Job logs and outputs are on the workspace share
(the pool mounts it), so ``stream``/``files``/``download`` read them as on every backend.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from ... import _layout as layout
from ..._models import ClusterSpec, Node, VmPriority
from ...exceptions import NotFoundError, NotSupportedError, ValidationError
from ...mounts import Mount
from ...remote.base import Runner
from ...share import Share
from ..azure.backend import AzureBackend
from ..azure.errors import is_not_found
from ..azure.node_setup import NodeEnvironment
from ..azure.preflight import SkuInfo, check_size_and_quota, list_skus
from ..azure.provision import max_nodes
from ..base import ClusterScheduler, ClusterStatus, LaunchTarget
from . import account as acct
from . import pool as pools
from .client import BatchService
from .job_mounts import STORAGE_ROOT, job_mounts
from .task import TASK_ID
from .task_files import BatchTaskFiles

TASK_FILES = "batch"  # the directory id of a job's Batch task files

log = logging.getLogger(__name__)

BATCH_SSH = (
    "ssh",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "BatchMode=yes",
)


class AzureBatchBackend(AzureBackend):
    """Clusters are Batch pools, jobs are multi-instance tasks; see docs/azure.md ("Two engines").

    ``node_python``/``node_mpirun``/``node_ssh_command``/``node_mpi_args`` say how the job's launcher
    runs on the pool's nodes (defaults: the stack the start task installs, Batch's inter-node SSH);
    ``node_mounts_dir`` is ``$AZ_BATCH_NODE_MOUNTS_DIR``; ``node_temp_root`` the node-local job folders.
    """

    engine: ClassVar[str] = "batch"
    queues_for_nodes: ClassVar[bool] = True
    status_from_scheduler: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        subscription_id: str | None = None,
        resource_group: str | None = None,
        location: str | None = None,
        credential: Any | None = None,
        *,
        batch_account: str | None = None,
        node_agent_sku: str = pools.NODE_AGENT_SKU,
        image: str = pools.DEFAULT_IMAGE,
        node_python: str | None = None,
        node_mpirun: str | None = None,
        node_ssh_command: Sequence[str] = BATCH_SSH,
        node_mpi_args: Sequence[str] | None = None,
        node_mounts_dir: str = pools.MOUNTS_DIR,
        node_temp_root: str = "/mnt/batch/tasks/tmp",
        node_env_vars: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        options.setdefault("ssh_source_cidr", "0.0.0.0/32")  # no SSH rule: this engine opens no port
        super().__init__(name, subscription_id, resource_group, location, credential, image=image, **options)
        self.batch_account = acct.validate_batch_account(
            batch_account
            or acct.batch_account_name(name, self.names.subscription_id, self.names.resource_group)
        )
        if not isinstance(node_agent_sku, str) or not node_agent_sku.startswith("batch.node."):
            raise ValidationError(
                "node_agent_sku", node_agent_sku, "a node agent SKU such as 'batch.node.ubuntu 22.04'"
            )
        pools.image_reference(image)
        env = NodeEnvironment()
        self.node_agent_sku = node_agent_sku
        # the stack the start task installs; without it, the image's own (python3, mpirun on PATH)
        stack = self.install_stack
        self.node_python = node_python or (env.python if stack else "python3")
        self.node_mpirun = node_mpirun or (env.mpirun if stack else "mpirun")
        self.node_ssh_command = tuple(node_ssh_command)
        rsh = " ".join(self.node_ssh_command)
        self.node_mpi_args = (
            tuple(node_mpi_args)
            if node_mpi_args is not None
            else (("--prefix", env.mpi_prefix or "/usr") if stack else ()) + ("--mca", "plm_rsh_agent", rsh)
        )
        self.node_mounts_dir = node_mounts_dir
        self.node_temp_root = node_temp_root
        self.node_env_vars = dict(node_env_vars or {"PATH": env.path or "/usr/bin:/bin"})
        self._batch_lock = threading.Lock()
        self._service: BatchService | None = None
        self._account_info: acct.BatchAccount | None = None

    def __repr__(self) -> str:
        return (
            f"AzureBatchBackend({self.workspace!r}, resource_group={self.names.resource_group!r}, "
            f"location={self.names.location!r}, batch_account={self.batch_account!r})"
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": self.engine, "batch_account": self.batch_account}

    # -- the account and its data-plane client ------------------------------------------------------------
    def _secrets(self) -> tuple[str, ...]:
        key = self.ssh_key().private_openssh if (self.state_dir / "id_ed25519").exists() else ""
        return tuple(s for s in (*super()._secrets(), key) if s)

    def _account(self, *, create: bool) -> acct.BatchAccount | None:
        """The Batch account (made when ``create``; None when it does not exist and may not be made)."""
        with self._batch_lock:
            account = self._account_info
        if account is None:
            account = (
                acct.ensure_account(self.clients, self.names, self.batch_account)
                if create
                else acct.get_account(self.clients, self.names, self.batch_account)
            )
            with self._batch_lock:
                self._account_info = account
        return account

    def _service_of(self, account: acct.BatchAccount) -> BatchService:
        with self._batch_lock:
            if self._service is None:
                self._service = BatchService(
                    account.endpoint, self.clients.credential, self.options, secrets=self._secrets
                )
            return self._service

    @property
    def service(self) -> BatchService:
        """The Batch account's data plane (the account is created on first use)."""
        account = self._account(create=True)
        assert account is not None
        return self._service_of(account)

    def pool_id(self, spec: ClusterSpec) -> str:
        return spec.name

    # -- clusters ------------------------------------------------------------------------------------------
    def scale_set(self, spec: ClusterSpec) -> dict[str, str] | None:
        return None  # the service sizes the pool (autoscale formula); there is no scale set

    def _sku(self, spec: ClusterSpec) -> SkuInfo:
        with self._lock:
            skus = self._skus
        if skus is None:
            skus = list_skus(self.clients, self.names.location)
            with self._lock:
                self._skus = skus
        return check_size_and_quota(
            skus, [], size=spec.vm_size, region=self.names.location, max_nodes=0, priority=spec.vm_priority
        )

    def check_cluster(self, spec: ClusterSpec, *, in_use: int | None = None) -> SkuInfo:
        """Preflight, creating nothing: the VM size is offered in the region (the region's SKU list, as
        on the scale-set engine), and the Batch account's core quota for the size's family (Spot: its Spot
        cores), read afresh, holds the cluster at its largest next to the account's other pools.
        Raises ``SkuNotAvailableError`` / ``QuotaShortError`` (both ``AzureQuotaError``)."""
        sku = self._sku(spec)
        account = acct.get_account(self.clients, self.names, self.batch_account)
        if account is None:  # made by create_cluster, which checks again once it exists
            return sku
        with self._batch_lock:
            self._account_info = account
        others = [p for p in self._service_of(account).list_pools() if p.get("id") != self.pool_id(spec)]
        used = acct.cores_in_use(others, self._skus or {}, sku, spec.vm_priority, account.properties)
        acct.check_account_quota(
            account.properties,
            sku,
            region=self.names.location,
            account=self.batch_account,
            nodes=max_nodes(spec),
            priority=spec.vm_priority,
            in_use_cores=used,
        )
        return sku

    def create_cluster(self, spec: ClusterSpec, *, timeout: float | None = None) -> None:
        """Add the pool (after the preflight); the service then allocates its nodes and runs the start
        task on each. A pool of that name already there is taken as this cluster's."""
        self.check_cluster(spec, in_use=0)
        install = spec.extra.get("install_stack", self.install_stack)
        if not isinstance(install, bool):
            raise ValidationError("install_stack", install, "True or False")
        self.provision()
        if self._account(create=False) is None:
            self._account(create=True)
            self.check_cluster(spec, in_use=0)  # the new account's quotas
        assert self._account_key is not None
        body = pools.pool_body(
            spec,
            pool_id=self.pool_id(spec),
            image=spec.image or self.image,
            node_agent_sku=self.node_agent_sku,
            share={
                "account": self.names.storage_account,
                "share": self.names.share,
                "key": self._account_key,
            },
            ssh_private_key=self.ssh_key().private_openssh,
            install_stack=install,
            keys={},
        )
        self.service.create_pool(body)

    def resize_cluster(self, spec: ClusterSpec, nodes: int, *, timeout: float | None = None) -> None:
        """A fixed size: autoscale off (when on), then the pool resized; nodes leave once their task
        completed (``taskcompletion``). No pool yet: it is created at that size."""
        service = self.service
        pool = service.get_pool(self.pool_id(spec))
        if pool is None:
            if nodes > 0:
                self.create_cluster(replace(spec, nodes=nodes, autoscale=None), timeout=timeout)
            return
        if nodes > 0:
            self.check_cluster(replace(spec, nodes=nodes, autoscale=None))
        if pool.get("enableAutoScale"):
            service.disable_autoscale(self.pool_id(spec))
        service.resize_pool(self.pool_id(spec), nodes, spot=spec.vm_priority is VmPriority.LOWPRIORITY)

    def enable_autoscale(self, spec: ClusterSpec) -> None:
        """Put the cluster's autoscale formula on its pool (``Cluster.set_autoscale``)."""
        if spec.autoscale is not None:
            self.service.enable_autoscale(self.pool_id(spec), pools.autoscale_formula(spec))

    def simulate_eviction(self, spec: ClusterSpec, node: str) -> bool:
        return False  # Batch has no API to preempt a node on request

    def delete_cluster(self, spec: ClusterSpec) -> None:
        """Delete the pool (its nodes go with it); no error when it is already gone."""
        self.service.delete_pool(self.pool_id(spec))

    def cluster_status(self, spec: ClusterSpec) -> ClusterStatus:
        service = self.service
        pool = service.get_pool(self.pool_id(spec))
        nodes = service.list_nodes(self.pool_id(spec)) if pool is not None else []
        return pools.cluster_status(pool, nodes)

    # -- jobs ----------------------------------------------------------------------------------------------
    def prepare(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> None:
        """Nothing to do before a job: Batch prepares its nodes (start task, mounts) and the job's
        coordination command checks each node when the job starts there."""
        return None

    def workspace_keys(self) -> dict[str, str]:
        """Storage account → key for mounts that give none: the workspace's own account."""
        self.provision()  # learns the workspace account's key
        key = self._account_key
        return {self.names.storage_account: key} if key else {}

    def prepare_job_mounts(self, spec: ClusterSpec, nodes: tuple[Node, ...], mounts: Sequence[Mount]) -> None:
        """Batch has no per-job mount: the job's coordination command mounts them on each of its nodes
        (job_mounts.py). Checked here, before anything is staged: each Azure mount has a key."""
        job_mounts(mounts, cluster_mounts=spec.mounts, job_id="-", keys=self.workspace_keys())

    def share_root(self) -> str:
        return posixpath.join(self.node_mounts_dir, self.names.share)

    def launch_target(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> LaunchTarget:
        """Where things are on the pool's nodes; the nodes themselves are chosen by Batch when the task
        starts (the launch configuration names a stand-in head, ``master``)."""
        return LaunchTarget(
            nodes=nodes or (Node(id="master", address="", machine="master"),),
            node_share_root=self.share_root(),
            mount_root=self.node_mounts_dir,
            temp_root=self.node_temp_root,
            python=self.node_python,
            mpirun=self.node_mpirun,
            ssh_command=self.node_ssh_command,
            mpi_args=self.node_mpi_args,
            env=dict(self.node_env_vars),
            num_gpus=self._gpus(spec),
            storage_root=STORAGE_ROOT,  # a job's own mounts, made by its coordination command
        )

    def _gpus(self, spec: ClusterSpec) -> int:
        """GPUs per node of the pool's size (AZ_BATCHAI_NUM_GPUS), from the region's SKU list."""
        return self._sku(spec).gpus

    def job_files(self, experiment: str, job: str, directory: str) -> Share | None:
        """``directory="batch"``: the job's Batch task files (its commands' stdout.txt and stderr.txt,
        read by range from the primary node while the node is there)."""
        if directory != TASK_FILES:
            return None
        record = self.share.read_json_or_none(layout.SHARE.status_record(experiment, job)) or {}
        job_id = record.get("batch_job_id")
        if not job_id:
            raise NotFoundError(
                "Batch task files", f"{experiment}/{job}", "the Batch account (not submitted)"
            )
        return BatchTaskFiles(self.service, str(job_id), TASK_ID)

    def head_runner(self, spec: ClusterSpec, nodes: tuple[Node, ...]) -> Runner:
        raise NotSupportedError(
            "a head-node runner", "azure (engine batch)", "the Batch service runs the job"
        )

    def scheduler(self, spec: ClusterSpec, *, nodes: tuple[Node, ...] | None = None) -> ClusterScheduler:
        from .scheduler import BatchScheduler

        return BatchScheduler(self, spec)

    # -- workspace removal -------------------------------------------------------------------------------
    def delete(self, *, timeout: float | None = None) -> None:
        """The Batch account goes with the workspace's other resources."""
        try:
            acct.delete_account(self.clients, self.names, self.batch_account)
        except Exception as exc:  # the resource group's removal takes it anyway
            if not is_not_found(exc):
                log.warning("could not delete Batch account %s: %s", self.batch_account, exc)
        super().delete(timeout=timeout)

    def close(self) -> None:
        with self._batch_lock:
            service, self._service = self._service, None
        if service is not None:
            service.close()
        super().close()
