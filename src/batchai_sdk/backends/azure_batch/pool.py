"""A cluster as an Azure Batch pool: pure builders of the pool's REST body and readers of its nodes.

The body follows the ``Pools_CreatePool_MountConfiguration`` example of the Batch data-plane API
(2025-06-01): the Azure HPC image (``microsoft-dsvm:ubuntu-hpc:2204``, Ubuntu 22.04 with the NVIDIA
driver, CUDA, NCCL and HPC-X/Open MPI) with its node agent ``batch.node.ubuntu 22.04``; inter-node
communication on and one task slot per node, as a multi-instance task needs; Spot or dedicated targets;
an autoscale formula the service evaluates from the cluster's min/max/idle settings; the start task is
the node setup (the training stack, then the cluster's own ``node_setup``); the mount configuration is the
workspace share plus the cluster's mounts. Batch mounts each under ``$AZ_BATCH_NODE_MOUNTS_DIR``
(``/mnt/batch/tasks/fsmounts``), which is the engine's ``AZ_BATCHAI_MOUNT_ROOT``.
"""

from __future__ import annotations

import math
import posixpath
import secrets
import shlex
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from ..._models import ClusterSpec, Node, NodeState, VmPriority
from ...exceptions import ValidationError
from ..azure.node_setup import BATCHAI_DIR, NodeEnvironment, _stack_script
from ..base import ClusterStatus
from .models import bm

DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
NODE_AGENT_SKU = "batch.node.ubuntu 22.04"
MOUNTS_DIR = "/mnt/batch/tasks/fsmounts"  # $AZ_BATCH_NODE_MOUNTS_DIR on Linux nodes
POOL_USER = "batchai"  # the pool's user: Batch sets up passwordless SSH between nodes for it
EVALUATION_INTERVAL = timedelta(minutes=5)  # the shortest interval the service allows
SETUP_LOG = "$AZ_BATCH_NODE_STARTUP_DIR/batchai-node-setup.log"
SHARE_MOUNT_OPTIONS = "-o vers=3.1.1,dir_mode=0777,file_mode=0777,serverino,mfsymlinks,actimeo=1"

# Batch's node states → ours (nodes in none of these are available: idle or running)
_PREPARING = {"creating", "starting", "waitingforstarttask", "rebooting", "reimaging", "upgradingos"}
_LEAVING = {"leavingpool", "preempted", "deallocating", "deallocated"}
_UNUSABLE = {"unusable", "starttaskfailed", "unknown", "offline"}


def autoscale_formula(spec: ClusterSpec) -> str:
    """The autoscale formula of a cluster with ``min_nodes``/``max_nodes``/idle settings.

    ``$PendingTasks`` counts active and running tasks; a job is one multi-instance task, so any pending
    task grows the pool to ``max_nodes`` (a job never needs more) and the nodes stay while a task was
    pending within the idle window; then the pool shrinks to ``min_nodes``, nodes leaving only once their
    task completed (``taskcompletion``). Until the service has samples for the window the pool holds
    ``initial_nodes``. Spot clusters set ``$TargetLowPriorityNodes`` (Batch's name for Spot nodes)."""
    auto = spec.autoscale
    if auto is None:
        raise ValidationError("autoscale", None, "min_nodes and max_nodes for an autoscale formula")
    idle = auto.idle_seconds_before_scaledown
    window = max(300, math.ceil(idle)) if idle is not None else 300
    initial = auto.initial_nodes if auto.initial_nodes is not None else auto.min_nodes
    spot = spec.vm_priority is VmPriority.LOWPRIORITY
    target, other = (
        ("$TargetLowPriorityNodes", "$TargetDedicatedNodes")
        if spot
        else ("$TargetDedicatedNodes", "$TargetLowPriorityNodes")
    )
    busy = (
        f"max($PendingTasks.GetSample(TimeInterval_Second * {window}))"
        if idle is not None
        else "1"  # no idle scale-down: keep max_nodes once grown
    )
    return "\n".join(
        [
            f"$minNodes = {auto.min_nodes};",
            f"$maxNodes = {auto.max_nodes};",
            f"$sampled = $PendingTasks.GetSamplePercent(TimeInterval_Second * {window}) >= 70;",
            f"$busy = $sampled ? {busy} : 0;",
            f"$wanted = $sampled ? ($busy > 0 ? $maxNodes : $minNodes) : {initial};",
            f"{target} = max($minNodes, min($maxNodes, $wanted));",
            f"{other} = 0;",
            "$NodeDeallocationOption = taskcompletion;",
        ]
    )


def image_reference(image: str) -> bm.BatchVmImageReference:
    """``publisher:offer:sku:version`` (marketplace) or an image / gallery resource id."""
    if image.startswith("/subscriptions/"):
        return bm.BatchVmImageReference(virtual_machine_image_id=image)
    parts = image.split(":")
    if len(parts) != 4 or not all(parts):
        raise ValidationError("image", image, "'publisher:offer:sku:version' or an image resource id")
    return bm.BatchVmImageReference(publisher=parts[0], offer=parts[1], sku=parts[2], version=parts[3])


def start_task_script(spec: ClusterSpec, *, install_stack: bool, extra_mounts: Iterable[str] = ()) -> str:
    """The start task: the training stack (as on the VM-scale-set engine), mounts Batch cannot make
    itself, then the cluster's ``node_setup`` (Batch AI's setupTask). Its log stays on the node's
    startup folder; Batch reports a failure as the node state ``starttaskfailed``."""
    lines = [
        "set -eu",
        f'log="{SETUP_LOG}"',
        'step() { echo "[batchai] $*"; }',
        'run() { "$@" >>"$log" 2>&1 || '
        '{ echo "[batchai] failed: $*" >&2; tail -n 20 "$log" >&2; exit 1; }; }',
        "export DEBIAN_FRONTEND=noninteractive",
        f"mkdir -p {shlex.quote(BATCHAI_DIR)}",
    ]
    if install_stack:
        lines += ["run apt-get update -q", *_stack_script(NodeEnvironment())]
    lines += list(extra_mounts)
    if spec.node_setup:
        lines += ['step "the cluster\'s node setup"', spec.node_setup]
    lines.append('step "node setup finished"')
    return "\n".join(lines) + "\n"


def _get(mount: Any, name: str) -> Any:
    return mount.get(name) if isinstance(mount, Mapping) else getattr(mount, name, None)


def cluster_mounts(spec: ClusterSpec) -> list[Any]:
    """The cluster's typed mount list (``ClusterSpec.mounts`` where the spec has one: the "as used"
    storage work; never read from ``extra``, which is recorded on the share with any key in it)."""
    mounts = getattr(spec, "mounts", None) or ()
    if not isinstance(mounts, (list, tuple)):
        raise ValidationError("mounts", mounts, "a list of mounts")
    return list(mounts)


def mount_configuration(
    mounts: Iterable[Any], *, keys: Mapping[str, str]
) -> tuple[list[bm.MountConfiguration], list[str]]:
    """(``mountConfiguration`` entries, start-task lines) for the cluster's mounts. ``keys``: storage
    account → key for mounts that give none (the workspace's own account). An unmanaged file system
    has no Batch mount type: its mount command runs in the start task, on the same root."""
    q = shlex.quote
    config: list[bm.MountConfiguration] = []
    lines: list[str] = []
    for mount in mounts:
        kind = _get(mount, "kind")
        rel = str(_get(mount, "relative_mount_path") or "")
        if not rel or "/" in rel or rel in (".", ".."):
            raise ValidationError("relative_mount_path", rel, "one folder name")
        account = str(_get(mount, "account_name") or "")
        key = _get(mount, "account_key") or keys.get(account)
        if kind in ("azure_file_share", "azure_blob_container") and not key:
            raise ValidationError(
                "account_key", None, f"the key of storage account {account!r} (mount {rel!r})"
            )
        if kind == "azure_file_share":
            host = _get(mount, "host") or f"{account}.file.core.windows.net"
            afs = bm.AzureFileShareConfiguration(
                account_name=account,
                azure_file_url=f"https://{host}/{_get(mount, 'share_name')}",
                account_key=str(key),
                relative_mount_path=rel,
                mount_options=SHARE_MOUNT_OPTIONS,
            )
            config.append(bm.MountConfiguration(azure_file_share_configuration=afs))
        elif kind == "azure_blob_container":
            blob = bm.AzureBlobFileSystemConfiguration(
                account_name=account,
                container_name=str(_get(mount, "container_name")),
                account_key=str(key),
                relative_mount_path=rel,
                blobfuse_options=_get(mount, "mount_options") or None,
            )
            config.append(bm.MountConfiguration(azure_blob_file_system_configuration=blob))
        elif kind == "file_server":
            source = f"{_get(mount, 'server')}:{_get(mount, 'source_directory') or _get(mount, 'export')}"
            nfs = bm.NfsMountConfiguration(
                source=source, relative_mount_path=rel, mount_options=_get(mount, "mount_options") or None
            )
            config.append(bm.MountConfiguration(nfs_mount_configuration=nfs))
        elif kind == "unmanaged_file_system":
            target = posixpath.join(MOUNTS_DIR, rel)
            lines += [
                f"step {q('mounting ' + rel)}",
                f"mkdir -p {q(target)}",
                f"mountpoint -q {q(target)} || run {_get(mount, 'mount_command')} {q(target)}",
            ]
        else:
            raise ValidationError("mounts", kind, "a mount of a kind Azure Batch can mount")
    return config, lines


def pool_body(
    spec: ClusterSpec,
    *,
    pool_id: str,
    image: str,
    node_agent_sku: str,
    share: Mapping[str, str],
    ssh_private_key: str,
    install_stack: bool,
    keys: Mapping[str, str],
) -> bm.BatchPoolCreateOptions:
    """The pool's REST body. ``share``: ``account``, ``share``, ``key`` of the workspace share. Holds the
    storage keys and the pool user's SSH key: never log it."""
    workspace_share = {
        "kind": "azure_file_share",
        "relative_mount_path": share["share"],
        "account_name": share["account"],
        "share_name": share["share"],
        "account_key": share["key"],
    }
    mounts, mount_lines = mount_configuration(
        [workspace_share, *cluster_mounts(spec)], keys={**keys, share["account"]: share["key"]}
    )
    script = start_task_script(spec, install_stack=install_stack, extra_mounts=mount_lines)
    spot = spec.vm_priority is VmPriority.LOWPRIORITY
    auto = spec.autoscale is not None
    return bm.BatchPoolCreateOptions(
        id=pool_id,
        display_name=f"batchai cluster {spec.name}",
        vm_size=spec.vm_size,
        virtual_machine_configuration=bm.VirtualMachineConfiguration(
            image_reference=image_reference(image), node_agent_sku_id=node_agent_sku
        ),
        mount_configuration=mounts,
        resize_timeout=timedelta(minutes=15),
        enable_inter_node_communication=True,  # multi-instance tasks need it
        task_slots_per_node=1,
        task_scheduling_policy=bm.BatchTaskSchedulingPolicy(node_fill_type=bm.BatchNodeFillType.SPREAD),
        user_accounts=[
            bm.UserAccount(
                name=POOL_USER,
                # required by the API, never used: the user logs in by the pool's SSH key only
                password=secrets.token_urlsafe(24),
                elevation_level=bm.ElevationLevel.ADMIN,
                linux_user_configuration=bm.LinuxUserConfiguration(ssh_private_key=ssh_private_key),
            )
        ],
        start_task=bm.BatchStartTask(
            command_line=f"/bin/bash -c {shlex.quote(script)}",
            user_identity=bm.UserIdentity(
                auto_user=bm.AutoUserSpecification(
                    scope=bm.AutoUserScope.POOL, elevation_level=bm.ElevationLevel.ADMIN
                )
            ),
            max_task_retry_count=1,
            wait_for_success=True,
            # setupTask.secrets: in the start task's environment (Batch keeps it with the pool, readable
            # by whoever can read the Batch account; never on the command line)
            environment_settings=[
                bm.EnvironmentSetting(name=k, value=v) for k, v in sorted(spec.node_setup_secrets.items())
            ],
        ),
        metadata=[bm.BatchMetadataItem(name="batchai-cluster", value=spec.name)],
        enable_auto_scale=auto,
        auto_scale_formula=autoscale_formula(spec) if auto else None,
        auto_scale_evaluation_interval=EVALUATION_INTERVAL if auto else None,
        target_dedicated_nodes=None if auto else (0 if spot else spec.nodes),
        target_low_priority_nodes=None if auto else (spec.nodes if spot else 0),
    )


def node_state(raw: str) -> NodeState | None:
    """Our infrastructure state of a Batch node state; None: available (idle or running a task)."""
    state = raw.lower()
    if state in _PREPARING:
        return NodeState.PREPARING
    if state in _LEAVING:
        return NodeState.LEAVING
    if state in _UNUSABLE:
        return NodeState.UNUSABLE
    return None


def cluster_status(pool: Mapping[str, Any] | None, nodes: Iterable[Mapping[str, Any]]) -> ClusterStatus:
    """The cluster's status from the pool (``allocationState``) and its nodes (REST JSON, pure)."""
    found: list[Node] = []
    states: dict[str, NodeState] = {}
    reasons: dict[str, str] = {}
    for raw in nodes:
        node_id = str(raw.get("id") or "")
        address = str(raw.get("ipAddress") or "")
        found.append(Node(id=node_id, address=address, machine=node_id, private_address=address or None))
        state = node_state(str(raw.get("state") or "unknown"))
        if state is not None:
            states[node_id] = state
        if state is NodeState.UNUSABLE:
            info = raw.get("startTaskInfo") or {}
            failure = (info.get("failureInfo") or {}).get("message")
            errors = [str(e.get("message") or e.get("code")) for e in raw.get("errors") or ()]
            reasons[node_id] = "; ".join(
                [f"Batch node state {raw.get('state')}"]
                + ([f"start task failed: {failure}"] if failure else [])
                + errors
            )
        elif str(raw.get("state")).lower() == "preempted":
            reasons[node_id] = "preempted (Spot capacity reclaimed)"
    resizing = bool(pool) and str((pool or {}).get("allocationState") or "steady").lower() != "steady"
    return ClusterStatus(resizing=resizing, nodes=tuple(found), node_states=states, reasons=reasons)
