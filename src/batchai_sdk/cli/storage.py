"""``batchai storage ...``: names for the workspaces' file shares, as ``az storage``."""

from __future__ import annotations

import argparse
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._layout import META
from .._models import utcnow, validate_name
from ..exceptions import AlreadyExistsError, BatchAIError, NotFoundError
from ..share import join, normalize
from ._context import Context, Result, UsageError
from ._format import account_table, account_view, file_table, file_view
from ._params import Commands, resource_group_arg, yes_arg
from ._registry import validate_account, validate_share

if TYPE_CHECKING:
    from ..workspace import Workspace


_SHARE = " --share-name batchaishare --account-name batchaistorage"  # in the examples


def register(commands: Commands) -> None:
    s = commands.group(
        "storage",
        "names for the workspaces' file shares, as az storage",
        examples=(
            "batchai storage account create -g batchai.horovod -n batchaistorage",
            "batchai storage share create -n batchaishare --account-name batchaistorage",
            "batchai storage directory create -n cifar" + _SHARE,
            "batchai storage file upload --source cifar_cnn_distributed.py --path cifar" + _SHARE,
            "batchai storage file list --path cifar" + _SHARE + " --output table",
        ),
    )
    _register_account(
        s.group(
            "account",
            "storage accounts",
            examples=(
                "batchai storage account create -g batchai.horovod -n batchaistorage -l eastus",
                "batchai storage account show -g batchai.horovod -n batchaistorage",
                "batchai storage account list -g batchai.horovod --output table",
                "batchai storage account delete -g batchai.horovod -n batchaistorage --yes",
            ),
        )
    )
    ss = s.group(
        "share",
        "file shares: each is a workspace's share",
        examples=(
            "batchai storage share create -n batchaishare --account-name batchaistorage",
            "batchai storage share create -n batchaishare --account-name batchaistorage -w batchaidev",
            "batchai storage share list --account-name batchaistorage",
        ),
    )
    p = ss.command("create", storage_share_create, "name a workspace's file share")
    p.add_argument("--name", "-n", required=True, help="the share's name")
    p.add_argument("--workspace", "-w", help="whose share (default: the resource group's only workspace)")
    p.add_argument("--quota", type=int, help="accepted and ignored")
    _account_args(p)
    _account_args(ss.command("list", storage_share_list, "list a storage account's shares"))
    sd = s.group(
        "directory",
        "directories on a share",
        examples=(
            "batchai storage directory create -n cifar" + _SHARE,
            "batchai storage directory delete -n cifar --recursive" + _SHARE,
        ),
    )
    p = sd.command("create", storage_directory_create, "create a directory on a share")
    p.add_argument("--name", "-n", required=True, help="the directory's path on the share")
    _share_args(p)
    p = sd.command(
        "delete", storage_directory_delete, "delete an empty directory (with --recursive: and its files)"
    )
    p.add_argument("--name", "-n", required=True, help="the directory's path on the share")
    p.add_argument("--recursive", action="store_true", help="also delete what it holds")
    p.add_argument("--fail-not-exist", action="store_true", help="an error when it does not exist")
    _share_args(p)
    _register_file(
        s.group(
            "file",
            "files on a share",
            examples=(
                "batchai storage file upload --source cifar_cnn_distributed.py --path cifar" + _SHARE,
                "batchai storage file download --path cifar/model.h5 --dest ." + _SHARE,
                "batchai storage file list --path cifar" + _SHARE + " --output table",
                "batchai storage file delete --path cifar/old.py" + _SHARE,
            ),
        )
    )


def _register_account(sa: Commands) -> None:
    p = sa.command("create", storage_account_create, "create a storage account name in a resource group")
    resource_group_arg(p)
    _account_name_arg(p)
    p.add_argument("--location", "-l", help="default: the resource group's location")
    p.add_argument("--sku", default="Standard_LRS", help="recorded and shown (default Standard_LRS)")
    p.add_argument("--kind", default="StorageV2", help="recorded and shown (default StorageV2)")
    p = sa.command("show", storage_account_show, "show a storage account")
    resource_group_arg(p)
    _account_name_arg(p)
    p = sa.command("delete", storage_account_delete, "forget a storage account name")
    resource_group_arg(p)
    _account_name_arg(p)
    yes_arg(p)
    resource_group_arg(sa.command("list", storage_account_list, "list storage accounts"))


def _register_file(sf: Commands) -> None:
    p = sf.command("upload", storage_file_upload, "upload a file (a directory --path receives it by name)")
    p.add_argument("--source", required=True, help="the local file to upload")
    p.add_argument(
        "--path",
        "-p",
        help="where on the share: a directory (created when missing) receives the file under its own name; "
        "a path ending in the file's extension is its new name",
    )
    _share_args(p)
    p = sf.command("delete", storage_file_delete, "delete a file")
    p.add_argument("--path", "-p", required=True, help="the file's path on the share")
    _share_args(p)
    p = sf.command(
        "download", storage_file_download, "download a file (into the working directory by default)"
    )
    p.add_argument("--path", "-p", required=True, help="the file's path on the share")
    p.add_argument("--dest", help="file or directory to write (default: the working directory)")
    _share_args(p)
    p = sf.command("list", storage_file_list, "list a directory of a share")
    p.add_argument("--path", "-p", default="", help="the directory to list (default: the share's root)")
    _share_args(p)


def _share_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--share-name", "-s", required=True, help="the share (a workspace's share)")
    _account_args(p)


def _account_name_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--name", "-n", required=True, help="the storage account: 3-24 lowercase letters and digits"
    )


def _account_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--account-name", help="storage account (default: $AZURE_STORAGE_ACCOUNT)")
    p.add_argument("--account-key", help="accepted and ignored (never stored)")
    p.add_argument("--connection-string", help="accepted and ignored (never stored)")
    p.add_argument("--auth-mode", help="accepted and ignored")


def storage_account_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group_name = ctx.group()
    name = validate_account(args.name)
    group = ctx.registry.get_group(group_name)
    try:
        owner, account = ctx.registry.find_account(name)
    except NotFoundError:
        owner, account = group, None
    if owner["name"] != group_name:
        raise AlreadyExistsError(
            "storage account", name, f"resource group {owner['name']!r} (names are global)"
        )
    if account is None:
        account = {
            "name": name,
            "location": args.location or group.get("location"),
            "sku": args.sku,
            "kind": args.kind,
            "created": utcnow().isoformat(),
            "shares": {},
        }
        group.setdefault("storageAccounts", {})[name] = account
        ctx.registry.save_group(group)
    return Result(account_view(group, account), account_table)


def storage_account_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = ctx.registry.find_account(validate_account(args.name))
    return Result(account_view(group, account), account_table)


def storage_account_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    only = ctx.optional_group()
    out = [
        account_view(g, a)
        for g in ctx.registry.list_groups()
        if only is None or g["name"] == only
        for _, a in sorted(g.get("storageAccounts", {}).items())
    ]
    return Result(out, account_table)


def storage_account_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _ = ctx.registry.find_account(validate_account(args.name))
    ctx.confirm(
        f"delete storage account {args.name!r} (the workspaces' files stay: they belong to the workspaces)"
    )
    group["storageAccounts"].pop(args.name, None)
    ctx.registry.save_group(group)
    return None


def _account(ctx: Context, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    name = args.account_name or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not name:
        raise UsageError("--account-name is required (or set AZURE_STORAGE_ACCOUNT)")
    return ctx.registry.find_account(validate_account(name))


def _share(ctx: Context, args: argparse.Namespace) -> Workspace:
    """The workspace whose share ``--share-name`` of ``--account-name`` names."""
    group, account = _account(ctx, args)
    share = validate_share(args.share_name)
    ws_name = account.get("shares", {}).get(share)
    if ws_name is None:
        raise NotFoundError(
            "share",
            share,
            f"storage account {account['name']!r} (create it with: batchai storage share create "
            f"--name {share} --account-name {account['name']})",
        )
    return ctx.open_workspace(group["name"], ws_name)


def storage_share_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    share = validate_share(args.name)
    if share in account.get("shares", {}):
        return Result({"created": False})
    workspaces = sorted(group.get("workspaces", {}))
    if args.workspace:
        ws_name = validate_name(args.workspace, "workspace name")
        if ws_name not in workspaces:
            raise NotFoundError("workspace", ws_name, f"resource group {group['name']!r}")
    elif len(workspaces) == 1:
        ws_name = workspaces[0]
    elif not workspaces:
        raise BatchAIError(
            f"resource group {group['name']!r} has no workspace whose share {share!r} could be; create one "
            f"first: batchai workspace create -g {group['name']} -w NAME"
        )
    else:
        raise UsageError(
            f"resource group {group['name']!r} has {len(workspaces)} workspaces ({', '.join(workspaces)}); "
            "say whose share this is with --workspace"
        )
    for other in group.get("storageAccounts", {}).values():
        for other_share, owner in other.get("shares", {}).items():
            if owner == ws_name:
                raise BatchAIError(
                    f"workspace {ws_name!r} has one file share, already named {other_share!r} in storage "
                    f"account {other['name']!r}; use that name"
                )
    account.setdefault("shares", {})[share] = ws_name
    ctx.registry.save_group(group)
    return Result({"created": True})


def storage_share_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, account = _account(ctx, args)
    return Result([{"name": s, "workspace": w} for s, w in sorted(account.get("shares", {}).items())])


def storage_directory_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    path = normalize(args.name)
    existed = share.exists(path)
    share.mkdir(path)
    return Result({"created": not existed})


def _user_path(path: str, flag: str) -> str:
    """A share path the user names, never the workspace's own records (``.batchai/``)."""
    rel = normalize(path)
    if not rel:
        raise UsageError(f"{flag} names the share's root: give a path inside it")
    if rel.split("/", 1)[0] == META:
        raise UsageError(f"{flag} {path!r} is the workspace's records: use batchai job/cluster delete")
    return rel


def _is_new_directory(path: str, source: Path) -> bool:
    """Whether a ``--path`` that does not exist yet names a directory: it ends with ``/``, or its last part
    lacks the uploaded file's extension (``--path cifar`` for ``train.py``; ``cifar/run.py`` is a name)."""
    if path.endswith("/"):
        return True
    suffix = posixpath.splitext(path.rstrip("/"))[1]
    return not suffix or suffix != source.suffix


def storage_file_upload(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    source = Path(args.source).expanduser()
    if not source.is_file():
        raise NotFoundError("local file", str(source))
    path = normalize(args.path or "")
    if path:
        _user_path(path, "--path")
    info = share.stat(path) if path else None
    if info is None and path and _is_new_directory(args.path, source):
        share.mkdir(path)  # a directory the tutorial would have created first: made, as az's --path implies
        ctx.note(f"created directory {path!r} on share {args.share_name!r}")
        info = share.stat(path)
    if not path or (info is not None and info.is_dir):
        path = join(path, source.name)  # az: a directory --path receives the file under its own name
    elif info is None and "/" in path:
        share.mkdir(posixpath.dirname(path))
    share.upload(source, path)
    stat = share.stat(path)
    return Result({"path": path, **(file_view(stat) if stat else {}), "name": posixpath.basename(path)})


def storage_file_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    path = _user_path(args.path, "--path")
    info = share.stat(path)
    if info is None:
        raise NotFoundError("file", path, f"share {args.share_name!r}")
    if info.is_dir:
        raise UsageError(f"{path!r} is a directory: batchai storage directory delete --name {path}")
    share.delete(path)
    return Result({"deleted": True})


def storage_directory_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    path = _user_path(args.name, "--name")
    info = share.stat(path)
    if info is None:
        if args.fail_not_exist:
            raise NotFoundError("directory", path, f"share {args.share_name!r}")
        return Result({"deleted": False})
    if not info.is_dir:
        raise UsageError(f"{path!r} is a file: batchai storage file delete --path {path}")
    held = share.list(path)
    if held and not args.recursive:
        raise UsageError(
            f"directory {path!r} is not empty ({len(held)} entries, e.g. {held[0].name!r}): delete them "
            "first, or add --recursive"
        )
    share.delete(path, recursive=True)
    return Result({"deleted": True})


def storage_file_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    dest = Path(args.dest).expanduser() if args.dest else Path.cwd()
    local = share.download(normalize(args.path), dest)
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})


def storage_file_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args).share
    return Result([file_view(f) for f in share.list(normalize(args.path or ""))], file_table)
