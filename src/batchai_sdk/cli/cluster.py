"""``batchai cluster ...``: clusters of nodes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

from ..exceptions import NotFoundError, ValidationError
from ..mounts import AzureBlobContainer, AzureFileShare
from ._context import NO_GROUP, Context, Handler, Result
from ._format import cluster_list_table, cluster_table, cluster_view, health_table
from ._mount_flags import ACCOUNT_ENV, add_mount_args, mounts_from_args, storage_key
from ._params import Commands, non_negative, resource_group_arg, workspace_arg, yes_arg


def register(commands: Commands) -> None:
    c = commands.group(
        "cluster",
        "clusters of nodes",
        examples=(
            "batchai cluster create -g batchai.horovod -w batchaidev -n nc6cluster "
            "--vm-size Standard_NC4as_T4_v3 --vm-priority dedicated --target 2 --generate-ssh-keys",
            "batchai cluster create -g batchai.horovod -w batchaidev -n auto "
            "--min 0 --max 4 --idle-seconds 300",
            "batchai cluster show -g batchai.horovod -w batchaidev -n nc6cluster --output table",
            "batchai cluster list -g batchai.horovod -w batchaidev --output table",
            "batchai cluster resize -g batchai.horovod -w batchaidev -n nc6cluster --target 0",
            "batchai cluster auto-scale -g batchai.horovod -w batchaidev -n nc6cluster --min 0 --max 4",
            "batchai cluster check -g batchai.horovod -w batchaidev -n nc6cluster --level full",
            "batchai cluster delete -g batchai.horovod -w batchaidev -n nc6cluster --yes",
        ),
    )
    p = _cluster_command(c, "create", cluster_create, "create a cluster (from flags or a cluster.json)")
    p.add_argument(
        "--config-file", "-f", help="Batch AI 2018-05-01 cluster.json; flags given as well override it"
    )
    p.add_argument(
        "--storage-account-name",
        help="the account of --afs-name/--bfs-name; fills <AZURE_BATCHAI_STORAGE_ACCOUNT> in the file "
        "(default: $AZURE_BATCHAI_STORAGE_ACCOUNT)",
    )
    p.add_argument(
        "--storage-account-key",
        help="its key; fills <AZURE_BATCHAI_STORAGE_KEY> in the file; never stored "
        "(prefer $AZURE_BATCHAI_STORAGE_KEY: a flag's value is in your shell history)",
    )
    add_mount_args(p, root="AZ_BATCHAI_MOUNT_ROOT")
    p.add_argument(
        "--use-auto-storage",
        action="store_true",
        help="as az: a storage account in resource group batchaiautostorage (made or reused) with file "
        "share batchaishare and blob container batchaicontainer, mounted at $AZ_BATCHAI_MOUNT_ROOT/autoafs "
        "and autobfs",
    )
    p.add_argument("--vm-size", "-s", help="e.g. Standard_NC4as_T4_v3 (Azure; optional on local, SSH, Slurm)")
    p.add_argument(
        "--vm-priority",
        choices=("dedicated", "lowpriority"),
        help="lowpriority: Spot VMs on Azure, which can be evicted (default dedicated)",
    )
    p.add_argument(
        "--target", "-t", type=non_negative, help="number of nodes (default 1, or --min with --max)"
    )
    _autoscale_args(p, required=False)
    p.add_argument("--image", "-i", help="node image (backend-specific)")
    p.add_argument("--setup-task", help="command line run on each node when it is set up")
    p.add_argument(
        "--health-check",
        choices=("off", "basic", "full"),
        help="the gate each node passes when it joins (default: basic on Azure, off elsewhere)",
    )
    p.add_argument(
        "--health-source",
        metavar="PATH",
        help="a folder on the head node where your health tool (an NHC cron job) leaves reports; applied "
        "when root or your user owns them and no one else can write them (docs/health.md)",
    )
    p.add_argument(
        "--allow-fault-injection",
        action="store_true",
        help="let fault drills (job inject-fault, job drill) kill and stop this cluster's jobs' processes",
    )
    p.add_argument("--generate-ssh-keys", action="store_true", help="accepted; see the note it prints")
    p.add_argument("--user-name", "-u", help="accepted; see the note it prints")
    p.add_argument("--ssh-key", "-k", help="accepted; see the note it prints")
    p.add_argument("--password", "-p", help="accepted and ignored (never stored)")
    _cluster_command(c, "show", cluster_show, "show a cluster")
    p = c.command("list", cluster_list, "list clusters")
    resource_group_arg(p)
    workspace_arg(p)
    p = _cluster_command(
        c, "resize", cluster_resize, "change a cluster's number of nodes (0 releases them all)"
    )
    p.add_argument(
        "--target", "-t", type=non_negative, required=True, help="number of nodes (0 releases them all)"
    )
    p = _cluster_command(
        c, "auto-scale", cluster_auto_scale, "let the cluster's scheduler size it between --min and --max"
    )
    _autoscale_args(p, required=True)
    node = c.group(
        "node",
        "a cluster's nodes",
        examples=(
            "batchai cluster node simulate-eviction -g batchai.horovod -w batchaidev -n nc6cluster "
            "--grace 30",
        ),
    )
    p = _cluster_command(
        node, "simulate-eviction", cluster_simulate_eviction, "evict a node as Azure evicts Spot VMs"
    )
    p.add_argument("--node", help="the node (default: the first node running a job)")
    p.add_argument("--grace", type=non_negative, default=30, help="seconds the ranks get to checkpoint (30)")
    p = _cluster_command(
        c, "check", cluster_check, "run the health gate on every node now; failing nodes become unusable"
    )
    p.add_argument(
        "--level",
        choices=("basic", "full"),
        default="basic",
        help="basic: seconds (GPUs, ECC, throttling, versions, a rendezvous); full: about a minute "
        "(DCGM, all-reduce bandwidth per node and between nodes)",
    )
    p.add_argument(
        "--report",
        metavar="FILE",
        help="apply this health report (JSON: level, nodes, unusable) of your own tool instead of "
        "running the gate; '-' reads it from stdin",
    )
    p = _cluster_command(c, "delete", cluster_delete, "delete a cluster")
    p.add_argument("--force", action="store_true", help="terminate its running jobs")
    yes_arg(p)


def _autoscale_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument(
        "--min", type=non_negative, required=required, help="autoscale: fewest nodes (0: scale to zero)"
    )
    p.add_argument("--max", type=non_negative, required=required, help="autoscale: most nodes")
    p.add_argument("--initial", type=non_negative, help="autoscale: nodes at creation (default --min)")
    p.add_argument(
        "--idle-seconds",
        type=non_negative,
        help="autoscale: idle time before a node goes (600; an Azure cluster without --min/--max: 1800)",
    )


def _cluster_command(c: Commands, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
    """A command on one cluster: -g, -w and --name."""
    p = c.command(name, handler, help_text)
    resource_group_arg(p)
    workspace_arg(p)
    p.add_argument("--name", "-n", required=True, help="the cluster")
    return p


def cluster_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    ws = ctx.open_workspace(group)
    kind = ws.backend.kind
    where = {
        "local": "its nodes are this machine",
        "ssh": "nodes are reached with the key file of the workspace's profile",
        "azure": "the azure backend makes and keeps the cluster's SSH key itself",
    }.get(kind, "")
    if args.generate_ssh_keys:
        ctx.note(f"--generate-ssh-keys has no effect on the {kind} backend ({where})")
    for flag, value in (
        ("--user-name", args.user_name),
        ("--ssh-key", args.ssh_key),
        ("--password", args.password),
    ):
        if value:
            ctx.note(f"{flag} is ignored on the {kind} backend ({where})")
    auto = args.min is not None or args.max is not None
    flags: dict[str, Any] = {
        "vm_size": args.vm_size,
        "vm_priority": args.vm_priority,
        "image": args.image,
        "node_setup": args.setup_task,
        "nodes": args.target,
        "min_nodes": args.min,
        "max_nodes": args.max,
        "initial_nodes": args.initial,
        "health_check": args.health_check,
        "health_source": args.health_source,
        "allow_fault_injection": True if args.allow_fault_injection else None,
    }
    idle: float | Literal["default"] = "default" if args.idle_seconds is None else args.idle_seconds
    account = args.storage_account_name or os.environ.get(ACCOUNT_ENV)
    key = storage_key(args, ctx.note)
    mounts = mounts_from_args(args, account=account, key=key)
    if args.use_auto_storage:
        from .storage import auto_storage

        location = None if group == NO_GROUP else ctx.registry.get_group(group).get("location")
        mounts += auto_storage(ctx, location or "local")
    for mount in mounts:  # --afs-name/--bfs-name of storage nobody created: say how to make it
        if (
            isinstance(mount, AzureFileShare | AzureBlobContainer)
            and ws.backend.storage_exists(mount) is False
        ):
            share = isinstance(mount, AzureFileShare)
            name = mount.share_name if isinstance(mount, AzureFileShare) else mount.container_name
            raise NotFoundError(
                "file share" if share else "blob container",
                name,
                f"storage account {mount.account_name!r} ({'--afs-name' if share else '--bfs-name'}; create "
                f"it with: batchai storage {'share' if share else 'container'} create --name {name} "
                f"--account-name {mount.account_name})",
            )
    if args.config_file:
        given = {k: v for k, v in flags.items() if v is not None}
        if mounts:
            given["mounts"] = mounts  # added to the file's mountVolumes, as az added them
        cluster = ws.create_cluster_from_batchai_json(
            args.name,
            Path(args.config_file).expanduser(),
            storage_account=account,
            storage_key=key,
            idle_seconds_before_scaledown=idle,
            on_note=ctx.note,
            **given,
        )
        return Result(cluster_view(cluster, group), cluster_table)
    flags["nodes"] = args.target if args.target is not None or auto else 1
    flags["vm_priority"] = args.vm_priority or "dedicated"
    flags["allow_fault_injection"] = bool(args.allow_fault_injection)
    cluster = ws.create_cluster(args.name, idle_seconds_before_scaledown=idle, mounts=mounts, **flags)
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    return Result(cluster_view(ctx.open_workspace(group).get_cluster(args.name), group), cluster_table)


def cluster_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    return Result(
        [cluster_view(c, group) for c in ctx.open_workspace(group).list_clusters()], cluster_list_table
    )


def cluster_resize(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    cluster = ctx.open_workspace(group).get_cluster(args.name).resize(args.target)
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_auto_scale(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    cluster = ctx.open_workspace(group).get_cluster(args.name)
    cluster.set_autoscale(
        min_nodes=args.min,
        max_nodes=args.max,
        initial_nodes=args.initial,
        idle_seconds_before_scaledown=600 if args.idle_seconds is None else args.idle_seconds,
    )
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_simulate_eviction(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    cluster = ctx.open_workspace(group).get_cluster(args.name)
    job = cluster.simulate_eviction(args.node, grace_seconds=args.grace)
    return Result({"cluster": cluster.name, "node": args.node, "job": job, "evicted": True})


def cluster_check(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    if args.report is not None:
        return _apply_report(ctx, group, args.name, args.report)
    report = ctx.open_workspace(group).get_cluster(args.name).check_nodes(args.level)
    value = {
        "cluster": args.name,
        "level": report.level,
        "seconds": report.seconds,
        "checks": [{"node": c.node, "check": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
        "unusable": dict(report.unusable),
        "notes": list(report.notes),
    }
    for note in report.notes:  # what was not checked, and why: also beside a table
        ctx.note(note)
    return Result(value, health_table, exit_code=1 if report.unusable else 0)


REPORT_MAX_BYTES = 64 * 1024  # as the scheduler bounds a report


def _apply_report(ctx: Context, group: str, name: str, path: str) -> Result:
    """``cluster check --report FILE``: the report of your own health tool, through the scheduler (which
    signs and applies it); exit 1 when it keeps a node out."""
    try:
        if path == "-":
            text = sys.stdin.read(REPORT_MAX_BYTES + 1)
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read(REPORT_MAX_BYTES + 1)
    except OSError as exc:
        raise ValidationError("--report", path, f"a readable JSON file ({exc.strerror or exc})") from None
    if len(text) > REPORT_MAX_BYTES:
        raise ValidationError("--report", path, f"a report of at most {REPORT_MAX_BYTES} bytes")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValidationError("--report", path, f"a JSON object ({exc})") from None
    if not isinstance(doc, dict):
        raise ValidationError("--report", path, "a JSON object with level, nodes and unusable")
    cluster = ctx.open_workspace(group).get_cluster(name)
    cluster.apply_health_report(doc)
    unusable = {str(k): str(v) for k, v in dict(doc.get("unusable") or {}).items()}
    value = {
        "cluster": name,
        "applied": True,
        "nodes": [str(n) for n in doc.get("nodes") or []],
        "unusable": unusable,
        "cluster_unusable": cluster.unusable_nodes(),
    }
    return Result(value, exit_code=1 if unusable else 0)


def cluster_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    ws = ctx.open_workspace(group)
    ws.get_cluster(args.name)
    ctx.confirm(f"delete cluster {args.name!r}" + (" and terminate its jobs" if args.force else ""))
    ws.delete_cluster(args.name, force=args.force)
    return None
