"""The az CLI's mount flags of ``cluster create`` and ``job create``: ``--afs-name``/``--afs-mount-path``,
``--bfs-name``/``--bfs-mount-path``, ``--nfs``/``--nfs-mount-path`` with ``--storage-account-name`` and
``--storage-account-key``, mapped onto ``batchai_sdk.mounts`` as az batchai (2018-05-01) mapped them onto
``mountVolumes``: one Azure File share, one blob container and one file server, at ``afs``, ``bfs`` and
``nfs`` unless a mount path is given (under ``$AZ_BATCHAI_MOUNT_ROOT`` for a cluster,
``$AZ_BATCHAI_JOB_MOUNT_ROOT`` for a job). More of them go in a configuration file, as with az.

The key is read from ``$AZURE_BATCHAI_STORAGE_KEY`` as az read it; one given as ``--storage-account-key``
is the user's choice (it is in this process's argv and the shell's history) and gets a warning. Either
way it goes only into the mounts' ``account_key``, which no record, log or child argv holds.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..mounts import AzureBlobContainer, AzureFileShare, FileServer, Mount
from ._context import UsageError

KEY_ENV = "AZURE_BATCHAI_STORAGE_KEY"
ACCOUNT_ENV = "AZURE_BATCHAI_STORAGE_ACCOUNT"
KEY_ON_ARGV = (
    "--storage-account-key puts the key in this command's argv and your shell history; "
    f"prefer the environment variable {KEY_ENV} (batchai never passes the key on to a command line)"
)


def add_mount_args(p: argparse.ArgumentParser, *, root: str) -> None:
    """The flags, worded for mounts under ``root`` ($AZ_BATCHAI_MOUNT_ROOT or $AZ_BATCHAI_JOB_MOUNT_ROOT)."""
    g = p.add_argument_group("mounts (as az batchai had them; more of them in a configuration file)")
    g.add_argument("--afs-name", help="an Azure File share of --storage-account-name to mount")
    g.add_argument("--afs-mount-path", help=f"where: ${root}/<path> (default afs)")
    g.add_argument("--bfs-name", help="a blob container of --storage-account-name to mount (blobfuse)")
    g.add_argument("--bfs-mount-path", help=f"where: ${root}/<path> (default bfs)")
    g.add_argument("--nfs", help="an NFS file server to mount: its name, or a Batch AI fileServers id")
    g.add_argument("--nfs-mount-path", help=f"where: ${root}/<path> (default nfs)")


def mounts_from_args(args: argparse.Namespace, *, account: str | None, key: str | None) -> list[Mount]:
    """The mounts the flags ask for (none when no --afs-name, --bfs-name or --nfs is given). ``account``:
    the storage account (--storage-account-name, or its default); ``key``: ``storage_key``'s."""
    for what, flag in (("afs_name", "--afs-name"), ("bfs_name", "--bfs-name"), ("nfs", "--nfs")):
        kind = what[:3]
        if getattr(args, f"{kind}_mount_path") is not None and getattr(args, what) is None:
            raise UsageError(f"--{kind}-mount-path needs {flag}")
    mounts: list[Mount] = []
    if args.afs_name is not None or args.bfs_name is not None:
        if not account:
            raise UsageError(
                "--afs-name and --bfs-name need --storage-account-name (or $AZURE_BATCHAI_STORAGE_ACCOUNT)"
            )
        if args.afs_name is not None:
            mounts.append(
                AzureFileShare(
                    relative_mount_path=args.afs_mount_path or "afs",
                    account_name=account,
                    share_name=args.afs_name,
                    account_key=key,
                )
            )
        if args.bfs_name is not None:
            mounts.append(
                AzureBlobContainer(
                    relative_mount_path=args.bfs_mount_path or "bfs",
                    account_name=account,
                    container_name=args.bfs_name,
                    account_key=key,
                )
            )
    if args.nfs is not None:
        # az took the file server's name or its resource id; the server is its last segment, as in job.json
        server = args.nfs.rstrip("/").rsplit("/", 1)[-1]
        mounts.append(FileServer(relative_mount_path=args.nfs_mount_path or "nfs", server=server))
    return mounts


def storage_key(args: argparse.Namespace, note: Callable[[str], None]) -> str | None:
    """--storage-account-key (with a warning to ``note``) or $AZURE_BATCHAI_STORAGE_KEY."""
    if args.storage_account_key:
        note(KEY_ON_ARGV)
        return str(args.storage_account_key)
    return os.environ.get(KEY_ENV) or None
