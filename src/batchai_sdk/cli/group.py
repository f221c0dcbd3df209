"""``batchai group ...``: resource groups, a name space of workspaces and storage accounts."""

from __future__ import annotations

import argparse
import shutil

from .._registry import validate_group
from ._context import Context, Result
from ._format import group_table, group_view
from ._params import Commands, yes_arg


def register(commands: Commands) -> None:
    g = commands.group(
        "group",
        "resource groups: a name space of workspaces and storage accounts",
        examples=(
            "batchai group create --name batchai.horovod --location eastus",
            "batchai group show --name batchai.horovod --output table",
            "batchai group exists --name batchai.horovod",
            "batchai group list --output table",
            "batchai group delete --name batchai.horovod --yes",
        ),
    )
    p = g.command("create", group_create, "create a resource group")
    _name_arg(p)
    p.add_argument("--location", "-l", required=True, help="location, e.g. eastus (Azure: the region)")
    p.add_argument("--tags", nargs="*", help="accepted and ignored")
    _name_arg(g.command("show", group_show, "show a resource group"))
    _name_arg(g.command("exists", group_exists, "whether a resource group exists (true/false)"))
    g.command("list", group_list, "list resource groups")
    p = g.command(
        "delete",
        group_delete,
        "delete a resource group: its workspaces (clusters, jobs, files) and storage accounts",
    )
    _name_arg(p)
    p.add_argument("--no-wait", action="store_true", help="accepted; deletion is synchronous")
    yes_arg(p)


def _name_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name", "-n", "--resource-group", "-g", dest="name", required=True, help="the resource group"
    )


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
    from .storage import remove_account_storage

    for account in data.get("storageAccounts", {}):
        remove_account_storage(ctx, account)  # as az group delete took its storage accounts
    ctx.registry.remove_group(name)
    return None
