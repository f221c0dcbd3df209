"""``batchai group ...``: resource groups, a name space of workspaces and storage accounts."""

from __future__ import annotations

import argparse
import shutil

from ._context import Context, Result
from ._format import group_table, group_view
from ._state import validate_group


def group_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    data = ctx.registry.create_group(validate_group(args.name), args.location)
    return Result(group_view(data), group_table)


def group_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result(group_view(ctx.registry.get_group(validate_group(args.name))), group_table)


def group_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result([group_view(g) for g in ctx.registry.list_groups()], group_table)


def group_exists(ctx: Context, args: argparse.Namespace) -> Result | None:
    return Result(ctx.registry.group_exists(validate_group(args.name)))


def group_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    name = validate_group(args.name)
    data = ctx.registry.get_group(name)
    workspaces = sorted(data.get("workspaces", {}))
    ctx.confirm(
        f"delete resource group {name!r} and its workspaces ({', '.join(workspaces) or 'none'}), "
        "clusters, jobs and files"
    )
    for ws_name in workspaces:
        entry = data["workspaces"][ws_name]
        ws = ctx.open_workspace(name, ws_name)
        ws.delete(force=True)
        if entry.get("backend") == "local":
            shutil.rmtree(entry["options"]["root"], ignore_errors=True)
        if entry.get("backend") == "ssh":
            ctx.note(
                f"workspace {ws_name!r}: files on the SSH share stay at {entry['options'].get('share_path')}"
            )
    ctx.registry.remove_group(name)
    return None
