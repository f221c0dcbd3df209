"""``batchai cluster ...``: clusters of nodes."""

from __future__ import annotations

import argparse

from ._context import Context, Result
from ._format import cluster_table, cluster_view


def cluster_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
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
    cluster = ws.create_cluster(
        args.name,
        vm_size=args.vm_size,
        nodes=args.target,
        vm_priority=args.vm_priority,
        image=args.image,
        node_setup=args.setup_task,
    )
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(cluster_view(ctx.open_workspace(group).get_cluster(args.name), group), cluster_table)


def cluster_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result([cluster_view(c, group) for c in ctx.open_workspace(group).list_clusters()], cluster_table)


def cluster_resize(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    cluster = ctx.open_workspace(group).get_cluster(args.name).resize(args.target)
    return Result(cluster_view(cluster, group), cluster_table)


def cluster_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    ws.get_cluster(args.name)
    ctx.confirm(f"delete cluster {args.name!r}" + (" and terminate its jobs" if args.force else ""))
    ws.delete_cluster(args.name, force=args.force)
    return None
