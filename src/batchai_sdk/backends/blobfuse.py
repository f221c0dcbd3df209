"""blobfuse2's configuration for a blob container mount: one spelling for the Azure and SSH backends' node
setup (the YAML of blobfuse2's ``--config-file``; the key goes in ``azstorage.account-key``)."""

from __future__ import annotations

from ..mounts import AzureBlobContainer


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
