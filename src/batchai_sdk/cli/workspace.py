"""``batchai workspace ...``: a workspace per registry entry, on the backend it was created with."""

from __future__ import annotations

import argparse
import posixpath
import shutil
from pathlib import Path
from typing import Any

from .._models import utcnow
from .._registry import BACKENDS
from ..exceptions import BatchAIError, NotFoundError
from ._context import Context, Result, UsageError
from ._format import workspace_table, workspace_view
from ._params import Commands, resource_group_arg, workspace_arg, yes_arg


def register(commands: Commands) -> None:
    w = commands.group(
        "workspace",
        "workspaces",
        examples=(
            "batchai workspace create -g batchai.horovod -w batchaidev",
            "batchai workspace create -g batchai.horovod -w sshdev --backend ssh",
            "batchai workspace show -g batchai.horovod -w batchaidev",
            "batchai workspace list -g batchai.horovod --output table",
            "batchai workspace delete -g batchai.horovod -w batchaidev --yes",
        ),
    )
    p = w.command("create", workspace_create, "create a workspace (returns the existing one if it exists)")
    resource_group_arg(p)
    workspace_arg(p, "--name", "-n")
    p.add_argument("--location", "-l", help="default: the resource group's")
    p.add_argument("--backend", choices=BACKENDS, help="default: the profile's backend (local if none)")
    p.add_argument(
        "--engine",
        choices=("vmss", "batch"),
        help="azure only: what runs clusters, VM scale sets (default) or the Azure Batch service",
    )
    p.add_argument(
        "--cluster-file",
        metavar="FILE",
        help="ssh: a YAML/JSON file with hosts, user, key_file, share_path, ... (docs/ssh.md); the "
        "workspace's share is that share_path, as Workspace.ssh_from_file(FILE) opens it",
    )
    p = w.command("show", workspace_show, "show a workspace")
    resource_group_arg(p)
    workspace_arg(p, "--name", "-n")
    p = w.command("list", workspace_list, "list workspaces (of one resource group with -g)")
    resource_group_arg(p)
    p = w.command("delete", workspace_delete, "delete a workspace with its clusters, experiments and files")
    resource_group_arg(p)
    workspace_arg(p, "--name", "-n")
    p.add_argument("--force", action="store_true", help="terminate running jobs")
    yes_arg(p)


def _new_workspace_entry(
    ctx: Context,
    kind: str,
    group: dict[str, Any],
    name: str,
    location: str | None,
    engine: str | None = None,
) -> dict[str, Any]:
    options = ctx.profile.options(kind)
    if kind == "local":
        base = options.get("root")
        root = (
            Path(base).expanduser() / group["name"] / name
            if base
            else ctx.registry.local_root(group["name"], name)
        )
        options = {"root": str(root)}
    elif kind == "ssh":
        missing = [k for k in ("hosts", "user", "share_root") if not options.get(k)]
        if missing:
            raise UsageError(
                "the ssh backend needs "
                + ", ".join(f"--{m.replace('_', '-')}" for m in missing)
                + " in the profile: batchai configure --backend ssh --hosts H1 H2 --user U --key-file F "
                "--share-root /mnt/share"
            )
        share_root = str(options.pop("share_root")).rstrip("/")
        options["share_path"] = f"{share_root}/{group['name']}/{name}"
        options["hosts"] = list(options["hosts"])
    elif kind == "azure":
        options["location"] = location or options.get("location") or group.get("location")
        if engine is not None:
            options["engine"] = engine
    elif kind == "slurm":
        if not options.get("share_root"):
            raise UsageError(
                "the slurm backend needs --share-root in the profile (a folder every Slurm node sees): "
                "batchai configure --backend slurm --share-root /shared/batchai [--partition P]"
            )
        share_root = str(options.pop("share_root")).rstrip("/")
        options["share_path"] = f"{share_root}/{group['name']}/{name}"
        options = {k: v for k, v in options.items() if v is not None}
    return {"backend": kind, "options": options, "created": utcnow().isoformat()}


def _make_workspace_folder(name: str, options: dict[str, Any]) -> None:
    """``<share root>/<group>/<workspace>`` on the head node: the share root (the mount every node sees)
    must exist, as ``Workspace.ssh`` requires of any share path; the workspace's folder below is made."""
    from ..backends.ssh import SSHBackend

    share_path = str(options["share_path"])
    root = posixpath.dirname(posixpath.dirname(share_path))
    probe = SSHBackend(name, **{**options, "share_path": root})  # the workspace's own host keys
    try:
        probe.check_share_path()
        probe.share.mkdir(posixpath.relpath(share_path, root))
    finally:
        probe.close()


def _cluster_file_entry(path: str) -> dict[str, Any]:
    from ..backends.ssh.cluster_file import load_cluster_file

    options = load_cluster_file(path)
    options.pop("name", None)  # the workspace is -w's
    return {"backend": "ssh", "options": options, "created": utcnow().isoformat()}


def workspace_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    group = ctx.registry.get_group(group_name)
    name = ctx.workspace_name()
    entry = group.setdefault("workspaces", {}).get(name)
    if entry is None:
        if args.cluster_file:
            if args.backend not in (None, "ssh"):
                raise UsageError("--cluster-file describes an ssh cluster: give it without --backend")
            kind = "ssh"
            entry = _cluster_file_entry(args.cluster_file)
        else:
            kind = args.backend or ctx.profile.backend
            if args.engine is not None and kind != "azure":
                raise UsageError("--engine applies to the azure backend only")
            entry = _new_workspace_entry(ctx, kind, group, name, args.location, args.engine)
        if kind == "ssh" and not args.cluster_file:
            _make_workspace_folder(name, entry["options"])
        try:
            ws = ctx.open_workspace(group_name, name, entry=entry)
        except NotFoundError as exc:
            if kind != "ssh":
                raise
            where = f"{entry['options']['share_path']} on {entry['options']['hosts'][0]}"
            raise BatchAIError(
                f"the workspace's share folder {where} could not be used ({exc}); create it on the shared "
                "file system (mkdir -p) and run this again"
            ) from exc
        group["workspaces"][name] = entry
        ctx.registry.save_group(group)
    else:  # creating an existing workspace returns it, as ARM's PUT did
        ws = ctx.open_workspace(group_name, name)
    return Result(workspace_view(ws, group, entry), workspace_table)


def workspace_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = ctx.workspace_name()
    group = ctx.registry.get_group(group_name)
    entry = ctx.registry.workspace_entry(group_name, name)
    return Result(workspace_view(ctx.open_workspace(group_name, name), group, entry), workspace_table)


def workspace_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    only = ctx.optional_group()
    groups = [ctx.registry.get_group(only)] if only else ctx.registry.list_groups()
    out = []
    for group in groups:
        for name, entry in sorted(group.get("workspaces", {}).items()):
            out.append(
                {
                    "name": name,
                    "resourceGroup": group["name"],
                    "location": entry.get("options", {}).get("location") or group.get("location"),
                    "backend": entry.get("backend"),
                    "creationTime": entry.get("created"),
                }
            )
    return Result(out, workspace_table)


def workspace_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = ctx.workspace_name()
    entry = ctx.registry.workspace_entry(group_name, name)
    ctx.confirm(f"delete workspace {name!r} with its clusters, experiments and files")
    ctx.open_workspace(group_name, name).delete(force=args.force)
    group = ctx.registry.get_group(group_name)
    group["workspaces"].pop(name, None)
    for account in group.get("storageAccounts", {}).values():
        for share in [s for s, w in account.get("shares", {}).items() if w == name]:
            account["shares"].pop(share)
            link = ctx.registry.home / "storage" / "afs" / account["name"] / share
            if link.is_symlink():
                link.unlink()  # the workspace's own share went with it
    ctx.registry.save_group(group)
    if entry.get("backend") == "local":
        shutil.rmtree(entry["options"]["root"], ignore_errors=True)
    return None
