"""``batchai storage ...``: storage accounts, their file shares and blob containers, as ``az storage``.

One storage model (docs/storage.md): a file share is (account, share) and a blob container (account,
container), one storage wherever it is named — these commands, ``ws.storage(...)``, job.json and
cluster.json ``mountVolumes``, ``cluster create --afs-name``. A share recorded with a workspace's name is
that workspace's own share (the records' home); every other share and container is a folder of its own
under ``$BATCHAI_HOME/storage/<afs|blob>/<account>/<name>``, the folder the local backend mounts.
"""

from __future__ import annotations

import argparse
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._layout import META
from .._models import utcnow, validate_name
from .._registry import validate_account, validate_share
from ..exceptions import AlreadyExistsError, BatchAIError, NotFoundError, ValidationError
from ..mounts import AzureBlobContainer, AzureFileShare, Mount
from ..share import LocalShare, Share, join, normalize
from ._context import Context, Result, UsageError
from ._format import account_table, account_view, file_table, file_view
from ._params import Commands, resource_group_arg, yes_arg

if TYPE_CHECKING:
    from ..workspace import Workspace


_SHARE = " --share-name batchaishare --account-name batchaistorage"  # in the examples


def register(commands: Commands) -> None:
    s = commands.group(
        "storage",
        "storage accounts, file shares and blob containers, as az storage",
        examples=(
            "batchai storage account create -g batchai.horovod -n batchaistorage",
            "batchai storage share create -n batchaishare --account-name batchaistorage",
            "batchai storage directory create -n cifar" + _SHARE,
            "batchai storage file upload --source cifar_cnn_distributed.py --path cifar" + _SHARE,
            "batchai storage file list --path cifar" + _SHARE + " --output table",
        ),
    )
    _register_blob(s)
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
        "file shares: several per account; one of them may be a workspace's own share",
        examples=(
            "batchai storage share create -n batchaishare --account-name batchaistorage",
            "batchai storage share create -n logs --account-name batchaistorage",
            "batchai storage share create -n batchaishare --account-name batchaistorage -w batchaidev",
            "batchai storage share list --account-name batchaistorage",
            "batchai storage share delete -n logs --account-name batchaistorage",
        ),
    )
    p = ss.command("create", storage_share_create, "create a file share in a storage account")
    p.add_argument("--name", "-n", required=True, help="the share's name")
    p.add_argument(
        "--workspace",
        "-w",
        help="make it this workspace's own share (default: the resource group's only workspace, when its "
        "share has no name yet; otherwise a share of its own)",
    )
    p.add_argument("--quota", type=int, help="accepted and ignored")
    _account_args(p)
    _account_args(ss.command("list", storage_share_list, "list a storage account's shares"))
    p = ss.command("delete", storage_share_delete, "delete a share and its files (not a workspace's own)")
    p.add_argument("--name", "-n", required=True, help="the share's name")
    _account_args(p)
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


def _register_blob(s: Commands) -> None:
    sc = s.group(
        "container",
        "blob containers",
        examples=(
            "batchai storage container create -n data --account-name batchaistorage",
            "batchai storage container list --account-name batchaistorage",
            "batchai storage container delete -n data --account-name batchaistorage",
        ),
    )
    p = sc.command("create", storage_container_create, "create a blob container")
    p.add_argument("--name", "-n", required=True, help="the container's name")
    p.add_argument("--public-access", help="accepted and ignored")
    _account_args(p)
    _account_args(sc.command("list", storage_container_list, "list a storage account's containers"))
    p = sc.command("delete", storage_container_delete, "delete a container and its blobs")
    p.add_argument("--name", "-n", required=True, help="the container's name")
    _account_args(p)
    sb = s.group(
        "blob",
        "blobs in a container",
        examples=(
            "batchai storage blob upload -c data -n mnist/train.gz -f train.gz --account-name batchaistorage",
            "batchai storage blob list -c data --prefix mnist/ --account-name batchaistorage",
            "batchai storage blob download -c data -n mnist/train.gz -f train.gz --account-name A",
            "batchai storage blob delete -c data -n mnist/train.gz --account-name batchaistorage",
            "batchai storage blob upload-batch -s mnist_data -d data --destination-path mnist_data "
            "--account-name batchaistorage",
        ),
    )
    p = sb.command("upload", storage_blob_upload, "upload a file as a blob")
    p.add_argument("--file", "-f", required=True, help="the local file")
    p.add_argument("--name", "-n", required=True, help="the blob's name ('/' makes folders)")
    _container_args(p)
    p = sb.command("upload-batch", storage_blob_upload_batch, "upload a folder's files as blobs")
    p.add_argument("--source", "-s", required=True, help="the local folder")
    p.add_argument("--destination", "-d", required=True, help="the container (or CONTAINER/PATH)")
    p.add_argument("--destination-path", help="a name prefix for the blobs")
    p.add_argument("--pattern", help="only files matching this glob (e.g. *.png)")
    _account_args(p)
    p = sb.command("download", storage_blob_download, "download a blob into a file")
    p.add_argument("--name", "-n", required=True, help="the blob's name")
    p.add_argument("--file", "-f", required=True, help="the local file to write")
    _container_args(p)
    p = sb.command("list", storage_blob_list, "list a container's blobs")
    p.add_argument("--prefix", help="only blobs whose name starts with this")
    _container_args(p)
    p = sb.command("delete", storage_blob_delete, "delete a blob")
    p.add_argument("--name", "-n", required=True, help="the blob's name")
    _container_args(p)


def _container_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--container-name", "-c", required=True, help="the blob container")
    _account_args(p)


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
    p.add_argument("--share-name", "-s", required=True, help="the file share")
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
        f"delete storage account {args.name!r} and its shares and containers (a workspace's own share "
        "stays: it belongs to the workspace)"
    )
    group["storageAccounts"].pop(args.name, None)
    ctx.registry.save_group(group)
    remove_account_storage(ctx, args.name)
    return None


def remove_account_storage(ctx: Context, account: str) -> None:
    """The folders of an account's shares and containers (a link to a workspace's share: only the link)."""
    import shutil

    for kind in ("afs", "blob"):
        folder = ctx.registry.home / "storage" / kind / account
        for entry in folder.iterdir() if folder.is_dir() else ():
            if entry.is_symlink():
                entry.unlink()
            else:
                shutil.rmtree(entry, ignore_errors=True)
        try:
            folder.rmdir()
        except OSError:
            pass


def _account(ctx: Context, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    name = args.account_name or os.environ.get("AZURE_STORAGE_ACCOUNT")
    if not name:
        raise UsageError("--account-name is required (or set AZURE_STORAGE_ACCOUNT)")
    return ctx.registry.find_account(validate_account(name))


def share_folder(ctx: Context, account: str, share: str) -> Path:
    """The folder of a share that is no workspace's own: what the local backend mounts for it."""
    return ctx.registry.home / "storage" / "afs" / account / share


def container_folder(ctx: Context, account: str, container: str) -> Path:
    return ctx.registry.home / "storage" / "blob" / account / container


def link_workspace_share(ctx: Context, account: str, share: str, ws: Workspace) -> None:
    """A local workspace's own share is the folder every mount of (account, share) sees: its storage
    folder is a link to the workspace's share. Made when the share is named, and for a registry of the old
    one-share layout (every share was a workspace's) the first time the workspace is opened; files an
    earlier job wrote into a separate folder of that storage are moved onto the share (never over a file)."""
    if ws.backend.kind != "local":
        return
    folder = share_folder(ctx, account, share)
    target = Path(ws.share.root)  # type: ignore[attr-defined]
    if folder.is_symlink():
        if folder.resolve() == target.resolve():
            return
        folder.unlink()
    elif folder.is_dir():
        for entry in sorted(folder.iterdir()):
            if not (target / entry.name).exists():
                entry.rename(target / entry.name)
        if any(folder.iterdir()):
            ctx.note(
                f"share {account}/{share}: {folder} and workspace {ws.name!r}'s share both hold files of "
                "the same name; the workspace's share is used, the folder's files are left where they are"
            )
            return
        folder.rmdir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.symlink_to(target, target_is_directory=True)
    except FileExistsError:
        pass  # another command made it at the same moment


def link_group_shares(ctx: Context, group: dict[str, Any], ws_name: str, ws: Workspace) -> None:
    """Every share of ``group``'s accounts recorded as ``ws_name``'s own (see ``link_workspace_share``)."""
    for account in group.get("storageAccounts", {}).values():
        for share, owner in account.get("shares", {}).items():
            if owner == ws_name:
                link_workspace_share(ctx, account["name"], share, ws)


def open_share(ctx: Context, account_name: str, share: str, group: dict[str, Any] | None = None) -> Share:
    """The share ``share`` of ``account_name``: its workspace's share, or its own folder."""
    if group is None:
        group, account = ctx.registry.find_account(account_name)
    else:
        account = group["storageAccounts"][account_name]
    shares = account.get("shares", {})
    if share not in shares:
        raise NotFoundError(
            "file share",
            share,
            f"storage account {account['name']!r} (create it with: batchai storage share create "
            f"--name {share} --account-name {account['name']})",
        )
    ws_name = shares[share]
    if ws_name is not None:
        ws = ctx.open_workspace(group["name"], ws_name)
        link_workspace_share(ctx, account["name"], share, ws)
        return ws.share
    return LocalShare(share_folder(ctx, account["name"], share), name=share)


def _share(ctx: Context, args: argparse.Namespace) -> Share:
    """The share ``--share-name`` of ``--account-name`` names."""
    group, account = _account(ctx, args)
    return open_share(ctx, account["name"], validate_share(args.share_name), group)


def storage_share_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    share = validate_share(args.name)
    shares = account.setdefault("shares", {})
    if share in shares and not args.workspace:
        return Result({"created": False})
    workspaces = sorted(group.get("workspaces", {}))
    named = {  # workspace -> (account, share) of its own share
        owner: (other["name"], other_share)
        for other in group.get("storageAccounts", {}).values()
        for other_share, owner in other.get("shares", {}).items()
        if owner is not None
    }
    ws_name: str | None = None
    if args.workspace:
        ws_name = validate_name(args.workspace, "workspace name")
        if ws_name not in workspaces:
            raise NotFoundError("workspace", ws_name, f"resource group {group['name']!r}")
        if named.get(ws_name, (account["name"], share)) != (account["name"], share):
            other_account, other_share = named[ws_name]
            raise BatchAIError(
                f"workspace {ws_name!r}'s own share is already named {other_share!r} in storage account "
                f"{other_account!r}; create {share!r} without --workspace: a share of its own, which jobs "
                "and clusters mount by name"
            )
        if share in shares and shares[share] not in (None, ws_name):
            raise AlreadyExistsError("file share", share, f"storage account {account['name']!r}")
        if share in shares and shares[share] == ws_name:
            return Result({"created": False})
    elif len(workspaces) == 1 and workspaces[0] not in named:
        ws_name = workspaces[0]  # the tutorials' first share: the workspace's own, as before
    existed = share in shares
    shares[share] = ws_name
    ctx.registry.save_group(group)
    if ws_name is not None:
        link_workspace_share(ctx, account["name"], share, ctx.open_workspace(group["name"], ws_name))
    else:
        share_folder(ctx, account["name"], share).mkdir(parents=True, exist_ok=True)
    return Result({"created": not existed})


def storage_share_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, account = _account(ctx, args)
    return Result([{"name": s, "workspace": w} for s, w in sorted(account.get("shares", {}).items())])


def storage_share_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    share = validate_share(args.name)
    shares = account.get("shares", {})
    if share not in shares:
        return Result({"deleted": False})
    if shares[share] is not None:
        raise UsageError(
            f"share {share!r} is workspace {shares[share]!r}'s own share (its records' home): "
            f"batchai workspace delete -w {shares[share]} removes it"
        )
    import shutil

    shutil.rmtree(share_folder(ctx, account["name"], share), ignore_errors=True)
    shares.pop(share)
    ctx.registry.save_group(group)
    return Result({"deleted": True})


def storage_directory_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args)
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
    share = _share(ctx, args)
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
    share = _share(ctx, args)
    path = _user_path(args.path, "--path")
    info = share.stat(path)
    if info is None:
        raise NotFoundError("file", path, f"share {args.share_name!r}")
    if info.is_dir:
        raise UsageError(f"{path!r} is a directory: batchai storage directory delete --name {path}")
    share.delete(path)
    return Result({"deleted": True})


def storage_directory_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args)
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
    share = _share(ctx, args)
    dest = Path(args.dest).expanduser() if args.dest else Path.cwd()
    local = share.download(normalize(args.path), dest)
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})


def storage_file_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    share = _share(ctx, args)
    return Result([file_view(f) for f in share.list(normalize(args.path or ""))], file_table)


# -- blob containers ----------------------------------------------------------------------------------


def open_container(ctx: Context, account_name: str, container: str) -> LocalShare:
    """The folder of blob container ``container`` of ``account_name`` (what the local backend mounts)."""
    _, account = ctx.registry.find_account(account_name)
    if container not in account.get("containers", {}):
        raise NotFoundError(
            "blob container",
            container,
            f"storage account {account['name']!r} (create it with: batchai storage container create "
            f"--name {container} --account-name {account['name']})",
        )
    return LocalShare(container_folder(ctx, account["name"], container), name=container)


def _container(ctx: Context, args: argparse.Namespace) -> LocalShare:
    _, account = _account(ctx, args)
    return open_container(ctx, account["name"], validate_share(args.container_name))


def blob_name(name: str) -> str:
    """A blob name that is a path inside its container: no ``..`` part, not absolute, not empty."""
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith("/") or any(p in ("..", ".") for p in parts) or not all(parts):
        raise ValidationError(
            "blob name", name, "a name inside the container: parts joined by '/', none empty, '.' or '..'"
        )
    return name


def storage_container_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    name = validate_share(args.name)
    containers = account.setdefault("containers", {})
    existed = name in containers
    containers[name] = {"created": containers.get(name, {}).get("created") or utcnow().isoformat()}
    ctx.registry.save_group(group)
    container_folder(ctx, account["name"], name).mkdir(parents=True, exist_ok=True)
    return Result({"created": not existed})


def storage_container_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, account = _account(ctx, args)
    return Result([{"name": c} for c in sorted(account.get("containers", {}))])


def storage_container_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, account = _account(ctx, args)
    name = validate_share(args.name)
    if account.get("containers", {}).pop(name, None) is None:
        return Result({"deleted": False})
    import shutil

    shutil.rmtree(container_folder(ctx, account["name"], name), ignore_errors=True)
    ctx.registry.save_group(group)
    return Result({"deleted": True})


def storage_blob_upload(ctx: Context, args: argparse.Namespace) -> Result | None:
    container = _container(ctx, args)
    name = blob_name(args.name)
    source = Path(args.file).expanduser()
    if not source.is_file():
        raise NotFoundError("local file", str(source))
    if "/" in name:
        container.mkdir(posixpath.dirname(name))
    container.upload(source, name)
    return Result({"name": name, "size": source.stat().st_size})


def storage_blob_upload_batch(ctx: Context, args: argparse.Namespace) -> Result | None:
    """Every file under ``--source`` as a blob named by its path there (after ``--destination-path``)."""
    import fnmatch

    _, account = _account(ctx, args)
    container_name, _, prefix = args.destination.partition("/")
    container = open_container(ctx, account["name"], validate_share(container_name))
    prefix = "/".join(p for p in (prefix.strip("/"), (args.destination_path or "").strip("/")) if p)
    source = Path(args.source).expanduser()
    if not source.is_dir():
        raise NotFoundError("local folder", str(source))
    out = []
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        rel = path.relative_to(source).as_posix()
        if args.pattern and not fnmatch.fnmatch(rel, args.pattern):
            continue
        name = blob_name(f"{prefix}/{rel}" if prefix else rel)
        if "/" in name:
            container.mkdir(posixpath.dirname(name))
        container.upload(path, name)
        out.append({"Blob": name, "Type": None})
    return Result(out)


def storage_blob_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    container = _container(ctx, args)
    name = blob_name(args.name)
    info = container.stat(name)
    if info is None or info.is_dir:
        raise NotFoundError("blob", name, f"container {args.container_name!r}")
    local = container.download(name, Path(args.file).expanduser())
    return Result({"name": name, "file": str(local), "size": local.stat().st_size})


def storage_blob_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    container = _container(ctx, args)
    root = Path(container.root)
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if args.prefix and not name.startswith(args.prefix):
            continue
        out.append({"name": name, "properties": {"contentLength": path.stat().st_size}})
    return Result(out, lambda result: [{"Name": b["name"], "Length": b["properties"]["contentLength"]}
                                       for b in result])  # fmt: skip


def storage_blob_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    container = _container(ctx, args)
    name = blob_name(args.name)
    info = container.stat(name)
    if info is None or info.is_dir:
        raise NotFoundError("blob", name, f"container {args.container_name!r}")
    container.delete(name)
    return Result({"deleted": True})


# -- auto-storage -------------------------------------------------------------------------------------

AUTO_GROUP = "batchaiautostorage"
AUTO_SHARE = "batchaishare"
AUTO_CONTAINER = "batchaicontainer"


def auto_storage(ctx: Context, location: str) -> list[Mount]:
    """``cluster create --use-auto-storage`` as the az CLI had it: a storage account in resource group
    ``batchaiautostorage`` (made, or the one already there for ``location``), with file share
    ``batchaishare`` and blob container ``batchaicontainer``, mounted at ``autoafs`` and ``autobfs``."""
    import hashlib

    registry = ctx.registry
    group = registry.get_group(AUTO_GROUP) if registry.group_exists(AUTO_GROUP) else None
    if group is None:
        group = registry.create_group(AUTO_GROUP, location)
    name = next(
        (n for n, a in sorted(group.get("storageAccounts", {}).items()) if a.get("location") == location),
        None,
    )
    if name is None:
        name = "bai" + hashlib.sha256(f"{registry.home}:{location}".encode()).hexdigest()[:21]
        group.setdefault("storageAccounts", {})[name] = {
            "name": name,
            "location": location,
            "sku": "Standard_LRS",
            "kind": "StorageV2",
            "created": utcnow().isoformat(),
            "shares": {},
        }
    account = group["storageAccounts"][name]
    account.setdefault("shares", {}).setdefault(AUTO_SHARE, None)
    account.setdefault("containers", {}).setdefault(AUTO_CONTAINER, {"created": utcnow().isoformat()})
    registry.save_group(group)
    share_folder(ctx, name, AUTO_SHARE).mkdir(parents=True, exist_ok=True)
    container_folder(ctx, name, AUTO_CONTAINER).mkdir(parents=True, exist_ok=True)
    ctx.note(f"auto-storage: storage account {name!r} in resource group {AUTO_GROUP!r}")
    return [
        AzureFileShare(relative_mount_path="autoafs", account_name=name, share_name=AUTO_SHARE),
        AzureBlobContainer(relative_mount_path="autobfs", account_name=name, container_name=AUTO_CONTAINER),
    ]
