"""How Azure storage is mounted, spelled once for the Azure and SSH backends' node setup: the SMB options of
an Azure File share, blobfuse2's configuration of a blob container (the YAML of its ``--config-file``; the
key goes in ``azstorage.account-key``) and, for rclone where a node has no blobfuse2, the container's SAS URL
(rclone's ``sas_url``: the same for every rclone version and any endpoint, the emulator's included, and the
account key itself never reaches the node)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ..mounts import AzureBlobContainer, AzureFileShare

SAS_DAYS = 365  # a cluster mount lives as long as its node; a node set up again gets a new one


def cifs_options(mount: AzureFileShare, credentials: str, *, owner: str = "") -> str:
    """``mount -t cifs -o`` options: SMB 3.1.1, the key in the ``credentials`` file, the share's modes;
    ``owner`` (``uid=...,gid=...,``) makes the files the admin user's."""
    return (
        f"vers=3.1.1,credentials={credentials},{owner}dir_mode={mount.directory_mode},"
        f"file_mode={mount.file_mode},serverino,nosharesock,actimeo=30,mfsymlinks"
    )


def blobfuse_config(mount: AzureBlobContainer, key: str, *, cache: str) -> list[str]:
    """blobfuse2's config (YAML) for ``mount``: key mode, a file cache on the local disk."""
    endpoint = blob_endpoint(mount)
    return [
        "allow-other: true",
        "logging:",
        "  type: syslog",
        "  level: log_warning",
        "components:",
        "  - libfuse",
        "  - file_cache",
        "  - attr_cache",
        "  - azstorage",
        "file_cache:",
        f"  path: {cache}",
        "  timeout-sec: 120",
        "azstorage:",
        "  type: block",
        f"  account-name: {mount.account_name}",
        f"  account-key: {key}",
        f"  endpoint: {endpoint}",
        "  mode: key",
        f"  container: {mount.container_name}",
    ]


def blob_endpoint(mount: AzureBlobContainer) -> str:
    return (mount.endpoint or f"https://{mount.account_name}.blob.core.windows.net").rstrip("/")


def blob_sas_url(mount: AzureBlobContainer, key: str, *, days: int = SAS_DAYS) -> str | None:
    """The container's URL with a SAS signed by ``key`` (read, write, delete, list, add, create; for
    ``days``), made here with azure-storage-blob and no network call; None where that library is missing."""
    try:
        from azure.storage.blob import ContainerSasPermissions, generate_container_sas
    except ImportError:
        return None
    sas = generate_container_sas(
        mount.account_name,
        mount.container_name,
        account_key=key,
        permission=ContainerSasPermissions(
            read=True, write=True, delete=True, list=True, add=True, create=True
        ),
        expiry=datetime.now(timezone.utc) + timedelta(days=days),
    )
    return f"{blob_endpoint(mount)}/{mount.container_name}?{sas}"
