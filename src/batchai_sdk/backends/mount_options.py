"""How Azure storage is mounted, spelled once for the Azure and SSH backends' node setup: the SMB options of
an Azure File share and blobfuse2's configuration of a blob container (the YAML of its ``--config-file``; the
key goes in ``azstorage.account-key``)."""

from __future__ import annotations

from ..mounts import AzureBlobContainer, AzureFileShare


def cifs_options(mount: AzureFileShare, credentials: str, *, owner: str = "") -> str:
    """``mount -t cifs -o`` options: SMB 3.1.1, the key in the ``credentials`` file, the share's modes;
    ``owner`` (``uid=...,gid=...,``) makes the files the admin user's."""
    return (
        f"vers=3.1.1,credentials={credentials},{owner}dir_mode={mount.directory_mode},"
        f"file_mode={mount.file_mode},serverino,nosharesock,actimeo=30,mfsymlinks"
    )


def blobfuse_config(mount: AzureBlobContainer, key: str, *, cache: str) -> list[str]:
    """blobfuse2's config (YAML) for ``mount``: key mode, a file cache on the local disk."""
    endpoint = mount.endpoint or f"https://{mount.account_name}.blob.core.windows.net"
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
