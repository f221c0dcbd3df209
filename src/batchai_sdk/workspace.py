"""The workspace: the top-level collection of experiments and clusters, and its file share."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from . import _layout as layout
from ._models import ClusterSpec, ExperimentSpec, autoscale_settings, utcnow, validate_name
from .backends.base import Backend
from .cluster import Cluster
from .exceptions import AlreadyExistsError, BatchAIError, NotFoundError, ValidationError
from .experiment import Experiment
from .mounts import Mount
from .node.policy.autoscale import DEFAULT_AZURE_IDLE_SECONDS, DEFAULT_IDLE_SECONDS
from .share import Share

log = logging.getLogger("batchai_sdk")


class Workspace:
    """Experiments, clusters and a share on one backend. Records live on the share, so every process
    that opens the same workspace sees the same objects."""

    def __init__(self, backend: Backend) -> None:
        # On Azure no I/O here (Azure SDK guideline: constructors do none): the share is a storage account
        # that the first write creates, and a preflight refusal must find nothing created. A local folder
        # or an SSH share is made (and checked) at once.
        self.backend = backend
        self._recorded = False
        # cluster → the size create_cluster(exist_ok=True) asked for, applied by the next submit (Job.submit)
        self.deferred_sizes: dict[str, int] = {}
        if not backend.provisions_lazily:
            self._record_workspace()

    def _record_workspace(self) -> None:
        """Write the workspace's own record once, with the first object it holds."""
        if self._recorded:
            return
        engine = getattr(self.backend, "engine", None)  # Azure: "vmss" or "batch"
        if not self.share.exists(layout.SHARE.workspace_record()):
            self.share.write_json(
                layout.SHARE.workspace_record(),
                {
                    "name": self.backend.workspace,
                    "backend": self.backend.kind,
                    "created": utcnow().isoformat(),
                    **({"engine": engine} if engine else {}),
                },
            )
        elif engine is not None:  # its clusters are the resources of the engine it was created with
            made = (self.share.read_json_or_none(layout.SHARE.workspace_record()) or {}).get(
                "engine"
            ) or "vmss"
            if made != engine:
                raise ValidationError(
                    "engine",
                    engine,
                    f"{made!r}, the engine workspace {self.backend.workspace!r} was created with",
                )
        self._recorded = True

    # -- constructors ---------------------------------------------------------------------------------
    @classmethod
    def local(
        cls,
        root: str | os.PathLike[str] | None = None,
        *,
        name: str = "local",
        allow_host_changes: bool | None = None,
        storage_root: str | os.PathLike[str] | None = None,
    ) -> Workspace:
        """The embedded backend: this machine is the cluster; ``root`` (default ``$BATCHAI_HOME`` or
        ``~/.batchai``) holds the share and the records. Created if missing. ``storage_root`` (default
        ``<root>/storage``) holds one folder per storage its mounts name (docs/storage.md).

        The ``batchai`` CLI opens the same workspace when given no ``-g``/``-w`` (``--root DIR`` for
        another ``root``): ``batchai job list -e EXPERIMENT`` lists the jobs made here, and the reverse."""
        from .backends.local import LocalBackend

        return cls(
            LocalBackend(
                root,
                name=validate_name(name, "workspace name"),
                allow_host_changes=allow_host_changes,
                storage_root=storage_root,
            )
        )

    @classmethod
    def from_cli(cls, resource_group: str, workspace: str) -> Workspace:
        """The workspace the ``batchai`` CLI created as ``-g resource_group -w workspace``, on the backend
        it was created with: a notebook and a terminal then follow the same jobs.

        ``batchai workspace create -g g -w w`` in a terminal, then ``Workspace.from_cli("g", "w")`` here.
        """
        from ._registry import Registry, batchai_home, validate_group

        registry = Registry(batchai_home())
        entry = registry.workspace_entry(
            validate_group(resource_group), validate_name(workspace, "workspace name")
        )
        return cls.from_registry_entry(entry, resource_group, workspace)

    @classmethod
    def from_registry_entry(cls, entry: Mapping[str, Any], group: str, name: str) -> Workspace:
        """The workspace a CLI registry entry describes (its backend and that backend's options)."""
        kind = entry.get("backend")
        options = dict(entry.get("options") or {})
        if kind == "local":
            from ._registry import batchai_home

            # the CLI's storage accounts are global: their shares are one folder for every workspace
            return cls.local(root=options.pop("root"), name=name, storage_root=batchai_home() / "storage")
        if kind == "ssh":
            return cls.ssh(name, **options)
        if kind == "azure":
            return cls.azure(name, resource_group=group, **options)
        if kind == "slurm":
            return cls.slurm(name, **options)
        raise BatchAIError(f"workspace {name!r} in resource group {group!r} has an unknown backend {kind!r}")

    @classmethod
    def ssh(
        cls,
        name: str,
        *,
        hosts: Sequence[str],
        user: str,
        key_file: str | os.PathLike[str],
        share_path: str,
        port: int = 22,
        known_hosts: str | os.PathLike[str] | None = None,
        trust_on_first_use: bool = False,
        jump_host: str | None = None,
        **options: Any,
    ) -> Workspace:
        """Machines reached by SSH that all see ``share_path``; the first host is the head node.

        ``key_file`` must exist and ``share_path`` must be a folder on the head node (made by you: a mount
        of the shared file system); both are checked here, before anything is written. Other options
        (``python``, ``authorized_keys_path``, ``tcp_interface``, ``mpi_args``, ``node_state_dir``, ...):
        see docs/ssh.md; ``Workspace.ssh_from_file`` reads them all from one file."""
        from .backends.ssh import SSHBackend

        backend = SSHBackend(
            validate_name(name, "workspace name"),
            hosts=list(hosts),
            user=user,
            key_file=key_file,
            port=port,
            share_path=share_path,
            known_hosts=known_hosts,
            trust_on_first_use=trust_on_first_use,
            jump_host=jump_host,
            **options,
        )
        try:
            backend.check_share_path()
        except BaseException:
            backend.close()
            raise
        return cls(backend)

    @classmethod
    def ssh_from_file(cls, path: str | os.PathLike[str], *, name: str | None = None) -> Workspace:
        """The SSH workspace a cluster file describes: hosts, user, key_file, share_path and any other
        keyword of ``Workspace.ssh``, in YAML or JSON (see docs/ssh.md). ``name`` (default: the file's
        ``name``, else its stem) names the workspace.

        ``batchai workspace create -g G -w W --cluster-file FILE`` reads the same file: both then see the
        same jobs."""
        from .backends.ssh.cluster_file import load_cluster_file

        options = load_cluster_file(path)
        label = name or options.pop("name", None) or os.path.splitext(os.path.basename(path))[0]
        options.pop("name", None)
        return cls.ssh(str(label), **options)

    @classmethod
    def azure(
        cls,
        name: str,
        *,
        subscription_id: str | None = None,
        resource_group: str,
        location: str,
        credential: Any = None,
        engine: Literal["vmss", "batch"] = "vmss",
        **options: Any,
    ) -> Workspace:
        """A resource group with a storage account and a file share. ``engine`` says what runs clusters:
        ``"vmss"`` (default) VM scale sets with our scheduler on each cluster's head node; ``"batch"`` the
        Azure Batch service (a pool per cluster, a multi-instance task per job). docs/azure.md compares them.
        """
        if engine == "batch":
            from .backends.azure_batch import AzureBatchBackend as backend_class
        elif engine == "vmss":
            from .backends.azure import AzureBackend as backend_class  # type: ignore[assignment]
        else:
            raise ValidationError("engine", engine, "'vmss' (VM scale sets) or 'batch' (Azure Batch)")

        return cls(
            backend_class(
                validate_name(name, "workspace name"),
                subscription_id=subscription_id,
                resource_group=resource_group,
                location=location,
                credential=credential,
                **options,
            )
        )

    @classmethod
    def slurm(
        cls,
        name: str,
        *,
        share_path: str,
        partition: str | None = None,
        account: str | None = None,
        login_host: str | None = None,
        user: str | None = None,
        key_file: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> Workspace:
        """An existing Slurm cluster: a cluster is a ``partition``, jobs go through ``sbatch``.

        Slurm's commands run on ``login_host`` over SSH, or on this machine when it is a login node
        (``login_host=None``). ``share_path`` is a directory every Slurm node sees. See docs/slurm.md.
        """
        from .backends.slurm import SlurmBackend

        return cls(
            SlurmBackend(
                validate_name(name, "workspace name"),
                share_path=share_path,
                partition=partition,
                account=account,
                login_host=login_host,
                user=user,
                key_file=key_file,
                **options,
            )
        )

    # -- properties -----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The workspace's name."""
        return self.backend.workspace

    @property
    def share(self) -> Share:
        """The workspace's file share: its records, the jobs' logs and outputs, your data."""
        return self.backend.share

    # -- experiments ----------------------------------------------------------------------------------
    def create_experiment(self, name: str, *, exist_ok: bool = False) -> Experiment:
        """Create the experiment ``name``; if it exists, return it with ``exist_ok=True``, else raise
        ``AlreadyExistsError``."""
        spec = ExperimentSpec(validate_name(name, "experiment name"))
        record = layout.SHARE.experiment_record(name)
        existing = self.share.read_json_or_none(record)
        if existing is not None:
            if exist_ok:
                return Experiment(self, ExperimentSpec.from_dict(existing))
            raise AlreadyExistsError(
                "experiment",
                name,
                f"workspace {self.name!r}",
                f"use workspace.get_experiment({name!r}), or create_experiment(..., exist_ok=True)",
            )
        self._record_workspace()
        self.share.write_json(record, spec.to_dict())
        return Experiment(self, spec)

    def get_experiment(self, name: str) -> Experiment:
        """The experiment ``name``; raises ``NotFoundError`` if there is none."""
        data = self.share.read_json_or_none(
            layout.SHARE.experiment_record(validate_name(name, "experiment name"))
        )
        if data is None:
            raise NotFoundError("experiment", name, f"workspace {self.name!r}")
        return Experiment(self, ExperimentSpec.from_dict(data))

    def _records(self, folder: str, record: Callable[[str], str]) -> list[dict[str, Any]]:
        """The records of the sub-folders of ``folder`` that have one (half-made folders are skipped)."""
        try:
            entries = self.share.list(folder)
        except NotFoundError:
            return []
        found = (self.share.read_json_or_none(record(e.name)) for e in entries if e.is_dir)
        return [data for data in found if data is not None]

    def list_experiments(self) -> list[Experiment]:
        """The workspace's experiments, in no particular order."""
        return [
            Experiment(self, ExperimentSpec.from_dict(data))
            for data in self._records(layout.SHARE.experiments_dir(), layout.SHARE.experiment_record)
        ]

    def delete_experiment(self, name: str, *, force: bool = False) -> None:
        """Delete an experiment and its jobs; refused while one has not ended unless ``force``. No error if
        already gone."""
        try:
            exp = self.get_experiment(name)
        except NotFoundError:
            return
        jobs = exp.list_jobs()
        for job in jobs:
            if not job.state.ended and not force:
                job.delete(force=False)  # raises, naming the job
        for job in jobs:
            job.delete(force=force)
        self.share.delete(layout.SHARE.experiment_record(name).rsplit("/", 1)[0], recursive=True)

    # -- clusters -------------------------------------------------------------------------------------
    def storage(self, mount: Mount) -> Share:
        """The storage a mount names, to upload to and read from (the local backend: its folder, shared by
        every cluster and job that names it); NotSupportedError where the client cannot reach it."""
        return self.backend.storage(mount)

    def create_cluster(
        self,
        name: str,
        *,
        vm_size: str | None = None,
        nodes: int | None = None,
        vm_priority: str = "dedicated",
        image: str | None = None,
        node_setup: str | None = None,
        exist_ok: bool = False,
        timeout: float | None = None,
        price_per_hour: float | None = None,
        min_nodes: int | None = None,
        max_nodes: int | None = None,
        initial_nodes: int | None = None,
        idle_seconds_before_scaledown: float | Literal["default"] | None = "default",
        health_check: Literal["off", "basic", "full"] | None = None,
        health_source: str | None = None,
        mounts: Sequence[Mount] = (),
        node_setup_secrets: Mapping[str, str] | None = None,
        allow_fault_injection: bool = False,
        **extra: Any,
    ) -> Cluster:
        """Create a cluster of ``nodes`` machines of ``vm_size`` (state ``resizing`` until they are ready).

        Or, with ``min_nodes`` and ``max_nodes`` instead of ``nodes``, a cluster its own scheduler sizes:
        it starts with ``initial_nodes`` (default ``min_nodes``), grows for queued jobs up to ``max_nodes``
        and lets nodes idle for ``idle_seconds_before_scaledown`` go, down to ``min_nodes``; no client needs
        to stay up. ``price_per_hour``: per node, for cost estimates (default: 0 on local/SSH, Azure's
        retail price). ``health_check``: the gate each node passes when it joins, ``"off"``, ``"basic"``
        (seconds) or ``"full"`` (about a minute); default ``"basic"`` on Azure, ``"off"`` elsewhere. A node
        that fails is ``unusable``, with its reason, and gets no job (see docs/health.md).
        ``health_source``: a folder on the head node where a health tool of yours (an NHC cron job) leaves
        its reports; the scheduler applies those it can trust (docs/health.md). ``mounts``:
        storage every node mounts under ``$AZ_BATCHAI_MOUNT_ROOT/<relative_mount_path>``
        (``batchai_sdk.mounts``; docs/storage.md). ``node_setup_secrets``: environment variables of
        ``node_setup`` whose values are kept only in the backend's secrets place (0600 files), never in a
        record, log or command line (Batch AI's setupTask.secrets; docs/cluster-json.md).
        ``allow_fault_injection``: let fault drills (``job.inject_fault``, ``batchai job drill``) kill,
        stop and take away this cluster's jobs' processes (off by default; docs/survive.md)."""
        auto = None
        idle = idle_seconds_before_scaledown
        if min_nodes is not None or max_nodes is not None:
            if min_nodes is None or max_nodes is None:
                raise ValidationError(
                    "max_nodes" if max_nodes is None else "min_nodes", None, "both min_nodes and max_nodes"
                )
            auto = autoscale_settings(
                min_nodes, max_nodes, initial_nodes, DEFAULT_IDLE_SECONDS if idle == "default" else idle
            )
            if nodes is not None and nodes != auto.initial:
                raise ValidationError("nodes", nodes, "omitted with min_nodes/max_nodes (use initial_nodes)")
            nodes = auto.initial
        if nodes is None:
            raise ValidationError("nodes", None, "a node count, or min_nodes and max_nodes for autoscale")
        if auto is None and self.backend.kind == "azure" and idle is not None and nodes > 0:
            # a safe default: a cluster nobody resizes to 0 still stops costing once idle (None opts out)
            limit = DEFAULT_AZURE_IDLE_SECONDS if idle == "default" else idle
            auto = autoscale_settings(0, nodes, nodes, limit)
        if vm_size is None:  # the machines of local, SSH and Slurm clusters are what they are
            if self.backend.kind == "azure":
                raise ValidationError("vm_size", None, "a VM size such as 'Standard_NC4as_T4_v3' on Azure")
            vm_size = self.backend.kind
        from .vm_sizes import check_vm_size

        check_vm_size(vm_size, self.backend.kind)  # a retired size is refused on Azure before any call
        spec = ClusterSpec(
            name=name,
            vm_size=vm_size,
            nodes=nodes,
            autoscale=auto,
            vm_priority=vm_priority,  # type: ignore[arg-type]
            image=image,
            node_setup=node_setup,
            extra=extra,
            price_per_hour=price_per_hour,
            health_check=health_check or ("basic" if self.backend.kind == "azure" else "off"),
            health_source=health_source,
            mounts=tuple(mounts),
            node_setup_secrets=dict(node_setup_secrets or {}),
            allow_fault_injection=allow_fault_injection,
        )
        if health_source is not None:
            from .backends.head_scheduler import HeadNodeScheduler

            if not isinstance(self.backend.scheduler(spec), HeadNodeScheduler):  # Slurm, Azure Batch
                raise ValidationError(
                    "health_source",
                    health_source,
                    "None here: only our scheduler (local, SSH, Azure scale "
                    "sets) reads a health source (docs/health.md)",
                )
        # The preflight first: on Azure a size or quota refusal then leaves no resource group, storage
        # account or share behind (reading the cluster's record would create them).
        self.backend.check_cluster(spec)
        existing = self.share.read_json_or_none(layout.SHARE.cluster_record(name))
        if existing is not None:
            if not exist_ok:
                raise AlreadyExistsError(
                    "cluster",
                    name,
                    f"workspace {self.name!r}",
                    f"use workspace.get_cluster({name!r}), or create_cluster(..., exist_ok=True)",
                )
            cluster = Cluster(self, ClusterSpec.from_dict(existing))
            if auto is None and cluster.target_nodes < nodes:
                # e.g. resized to 0 by the last run: it grows back when this script submits a job, not now
                # (a re-run that only re-attaches to its finished job then costs no node-minute)
                log.info(
                    "cluster %s has %d node(s); it grows to %d when a job is submitted",
                    name,
                    cluster.target_nodes,
                    nodes,
                )
                self.deferred_sizes[name] = nodes
            return cluster
        self.backend.create_cluster(spec, timeout=timeout)
        self._record_workspace()
        self.share.write_json(layout.SHARE.cluster_record(name), spec.to_dict())
        cluster = Cluster(self, spec)
        cluster._start_scheduler()
        return cluster

    def create_cluster_from_batchai_json(
        self,
        name: str,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        storage_account: str | None = None,
        storage_key: str | None = None,
        on_note: Callable[[str], None] | None = None,
        **overrides: Any,
    ) -> Cluster:
        """Create the cluster a Batch AI 2018-05-01 cluster.json describes (a path, JSON text or a dict), as
        ``az batchai cluster create -f`` did: ``overrides`` (``create_cluster``'s keywords, e.g.
        ``vm_size``, ``nodes``) win over the file, as flags did. What the file asks for that this backend
        does differently goes to ``on_note`` (default: logged as warnings; docs/cluster-json.md); errors
        name the JSON path. ``mounts`` given here are added to the file's ``mountVolumes``, as az's
        ``--afs-name``/``--bfs-name``/``--nfs`` were."""
        from .batchai_json import parse_cluster_json

        parsed = parse_cluster_json(
            source, backend=self.backend.kind, storage_account=storage_account, storage_key=storage_key
        )
        for note in parsed.notes:
            if on_note is not None:
                on_note(note)
            else:
                log.warning("cluster %s: %s", name, note)
        args = dict(parsed.create_args)
        if {"nodes", "min_nodes", "max_nodes"} & set(overrides):
            for key in ("nodes", "min_nodes", "max_nodes", "initial_nodes"):
                args.pop(key, None)  # scale given with the call replaces the file's, whole
        added = tuple(overrides.pop("mounts", ()))
        args.update(overrides)
        if added:
            args["mounts"] = (*args.get("mounts", ()), *added)
        if not {"nodes", "min_nodes"} & set(args):
            args["nodes"] = 0  # Batch AI's default targetNodeCount
        return self.create_cluster(name, **args)

    def get_cluster(self, name: str) -> Cluster:
        """The cluster ``name``; raises ``NotFoundError`` if there is none."""
        data = self.share.read_json_or_none(layout.SHARE.cluster_record(validate_name(name, "cluster name")))
        if data is None:
            raise NotFoundError("cluster", name, f"workspace {self.name!r}")
        return Cluster(self, ClusterSpec.from_dict(data))

    def list_clusters(self) -> list[Cluster]:
        """The workspace's clusters, in no particular order."""
        return [
            Cluster(self, ClusterSpec.from_dict(data))
            for data in self._records(layout.SHARE.clusters_dir(), layout.SHARE.cluster_record)
        ]

    def delete_cluster(self, name: str, *, force: bool = False) -> None:
        """Delete a cluster; refused while it runs jobs unless ``force``. No error if already gone."""
        try:
            cluster = self.get_cluster(name)
        except NotFoundError:
            return
        cluster.delete(force=force)

    # -- lifetime ---------------------------------------------------------------------------------------
    def delete(self, *, force: bool = False) -> None:
        """Remove the workspace: its clusters, then what the backend created (a resource group on Azure)."""
        for cluster in self.list_clusters():
            cluster.delete(force=force)
        self.backend.delete()

    def close(self) -> None:
        """Close the backend's connections (SSH, HTTP); clusters and jobs keep running. ``with Workspace...``
        closes it too."""
        self.backend.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """The workspace as ``az batchai workspace show`` prints it (JSON-ready): backend, location, share."""
        return {**self.backend.describe(), "name": self.name}

    def __repr__(self) -> str:
        return f"Workspace({self.name!r}, backend={self.backend.kind!r})"

    def _repr_html_(self) -> str:
        from ._display import workspace_html

        return workspace_html(self)
