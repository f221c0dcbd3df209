"""The storage a cluster or a job mounts, as Batch AI's ``mountVolumes`` had it: Azure File shares, blob
containers, NFS file servers and any file system with a mount command, each seen under a
``relative_mount_path`` (``$AZ_BATCHAI_MOUNT_ROOT/<path>`` on a cluster, ``$AZ_BATCHAI_JOB_MOUNT_ROOT/<path>``
for a job).

The workspace share stays the default mount and our records' home; these are the others. What each backend
does with each kind is in docs/storage.md. A storage key given here (``account_key``) is a secret: it is not
in ``repr``, ``to_dict`` or any record, and reaches a node only through the backend's secrets path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

from .exceptions import ValidationError

__all__ = [
    "AzureBlobContainer",
    "AzureFileShare",
    "FileServer",
    "Mount",
    "UnmanagedFileSystem",
    "mount_from_dict",
    "mount_to_dict",
    "storage_key",
    "validate_mounts",
]

MOUNT_PATH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
ACCOUNT_RE = re.compile(r"[a-z0-9]{3,24}")
SHARE_RE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")  # Azure's share/container names
HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
MODE_RE = re.compile(r"0?[0-7]{3}")
# mount options go into one comma-separated -o argument: no spaces, quotes or shell characters
OPTIONS_RE = re.compile(r"[A-Za-z0-9_.,=:/@+-]{1,512}")
EXPORT_RE = re.compile(r"/(?:[A-Za-z0-9_.+@-]+/?)*")


def _check(value: object, pattern: re.Pattern[str], field_name: str, expected: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value.split("/"):
        raise ValidationError(field_name, value, expected)
    return value


def _check_account_key(value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value or any(c in value for c in "\0\n\r")):
        raise ValidationError("account_key", value, "the storage account's key, one line of text")


def _check_mount_path(value: object) -> None:
    _check(
        value,
        MOUNT_PATH_RE,
        "relative_mount_path",
        "one folder name of letters, digits, '.', '_' and '-' (at most 64), such as 'afs'",
    )


@dataclass(frozen=True)
class AzureFileShare:
    """An Azure File share (SMB 3): Batch AI's ``azureFileShares[]``."""

    kind: ClassVar[str] = "azure_file_share"
    relative_mount_path: str
    account_name: str
    share_name: str
    host: str | None = None  # default <account>.file.core.windows.net
    file_mode: str = "0777"
    directory_mode: str = "0777"
    account_key: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_mount_path(self.relative_mount_path)
        _check(self.account_name, ACCOUNT_RE, "account_name", "a storage account name (3-24 a-z, 0-9)")
        _check(self.share_name, SHARE_RE, "share_name", "a file share name (3-63 a-z, 0-9, '-')")
        if self.host is not None:
            _check(self.host, HOST_RE, "host", "a host name such as myaccount.file.core.windows.net")
        _check(self.file_mode, MODE_RE, "file_mode", "an octal mode such as '0777'")
        _check(self.directory_mode, MODE_RE, "directory_mode", "an octal mode such as '0777'")
        _check_account_key(self.account_key)

    @property
    def file_host(self) -> str:
        """The SMB server: ``host``, else ``<account>.file.core.windows.net``."""
        return self.host or f"{self.account_name}.file.core.windows.net"


@dataclass(frozen=True)
class AzureBlobContainer:
    """A blob container mounted with blobfuse: Batch AI's ``azureBlobFileSystems[]``."""

    kind: ClassVar[str] = "azure_blob_container"
    relative_mount_path: str
    account_name: str
    container_name: str
    mount_options: str | None = None
    endpoint: str | None = None  # default https://<account>.blob.core.windows.net
    account_key: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_mount_path(self.relative_mount_path)
        _check(self.account_name, ACCOUNT_RE, "account_name", "a storage account name (3-24 a-z, 0-9)")
        _check(self.container_name, SHARE_RE, "container_name", "a container name (3-63 a-z, 0-9, '-')")
        _check_account_key(self.account_key)
        if self.mount_options is not None:
            _check(self.mount_options, OPTIONS_RE, "mount_options", "comma-separated mount options")
        if self.endpoint is not None and not re.fullmatch(
            r"https?://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._-]+)*/?", self.endpoint
        ):
            raise ValidationError(
                "endpoint", self.endpoint, "a blob endpoint URL such as https://a.blob.core.windows.net"
            )


@dataclass(frozen=True)
class FileServer:
    """An NFS export: Batch AI's ``fileServers[]`` (its file server's ``/data``, or ``source_directory``)."""

    kind: ClassVar[str] = "file_server"
    relative_mount_path: str
    server: str  # host name or address of the NFS server
    export: str = "/data"
    source_directory: str | None = None
    mount_options: str | None = None

    def __post_init__(self) -> None:
        _check_mount_path(self.relative_mount_path)
        _check(self.server, HOST_RE, "server", "the NFS server's host name or address")
        _check(self.export, EXPORT_RE, "export", "an absolute exported path such as /data")
        if self.source_directory is not None:
            _check(self.source_directory, EXPORT_RE, "source_directory", "an absolute path such as /data/x")
        if self.mount_options is not None:
            _check(self.mount_options, OPTIONS_RE, "mount_options", "comma-separated mount options")

    @property
    def remote_path(self) -> str:
        """``server:/path`` as mount.nfs takes it (``source_directory`` when set, else the export)."""
        return f"{self.server}:{self.source_directory or self.export}"


@dataclass(frozen=True)
class UnmanagedFileSystem:
    """Any file system with a mount command: Batch AI's ``unmanagedFileSystems[]``. The mount point is
    appended to ``mount_command`` as its last argument, as Batch AI did."""

    kind: ClassVar[str] = "unmanaged_file_system"
    relative_mount_path: str
    mount_command: str

    def __post_init__(self) -> None:
        _check_mount_path(self.relative_mount_path)
        if (
            not isinstance(self.mount_command, str)
            or not self.mount_command.strip()
            or "\n" in self.mount_command
        ):
            raise ValidationError("mount_command", self.mount_command, "a one-line mount command")


Mount: TypeAlias = AzureFileShare | AzureBlobContainer | FileServer | UnmanagedFileSystem
_KINDS: dict[str, type[Any]] = {
    cls.kind: cls for cls in (AzureFileShare, AzureBlobContainer, FileServer, UnmanagedFileSystem)
}


def storage_key(mount: Mount) -> str:
    """What a mount names, as a relative folder path: two mounts of the same storage have the same key
    (the local backend keeps each storage in the folder ``<root>/storage/<key>``)."""
    if isinstance(mount, AzureFileShare):
        return f"afs/{mount.account_name}/{mount.share_name}"
    if isinstance(mount, AzureBlobContainer):
        return f"blob/{mount.account_name}/{mount.container_name}"
    if isinstance(mount, FileServer):
        path = (mount.source_directory or mount.export).strip("/") or "root"
        return f"nfs/{mount.server}/{path}"
    import hashlib  # loads OpenSSL: only unmanaged mounts need it

    digest = hashlib.sha256(mount.mount_command.encode()).hexdigest()[:16]
    return f"fs/{digest}"


def describe(mount: Mount) -> str:
    """A short, secret-free description: ``azure file share myaccount/logs at 'logs'``."""
    if isinstance(mount, AzureFileShare):
        what = f"azure file share {mount.account_name}/{mount.share_name}"
    elif isinstance(mount, AzureBlobContainer):
        what = f"blob container {mount.account_name}/{mount.container_name}"
    elif isinstance(mount, FileServer):
        what = f"NFS {mount.remote_path}"
    else:
        what = "file system mounted by its command"
    return f"{what} at {mount.relative_mount_path!r}"


def mount_to_dict(mount: Mount) -> dict[str, Any]:
    """JSON-ready values with a ``kind`` tag; never the account key."""
    data = {k: v for k, v in vars(mount).items() if k != "account_key" and v is not None}
    return {"kind": mount.kind, **data}


def mount_from_dict(data: Mapping[str, Any], field_name: str = "mounts") -> Mount:
    if not isinstance(data, Mapping) or data.get("kind") not in _KINDS:
        raise ValidationError(field_name, data, f"a mount with kind one of {', '.join(_KINDS)}")
    cls = _KINDS[str(data["kind"])]
    try:
        return cls(**{k: v for k, v in data.items() if k != "kind"})  # type: ignore[no-any-return]
    except TypeError as exc:
        raise ValidationError(
            field_name, data.get("kind"), f"the fields of a {data['kind']} ({exc})"
        ) from None


def validate_mounts(mounts: Iterable[Any] | None, field_name: str = "mounts") -> tuple[Mount, ...]:
    """A tuple of mounts (dicts from ``mount_to_dict`` are accepted), each ``relative_mount_path`` once."""
    if mounts is None:
        return ()
    if isinstance(mounts, (str, bytes, Mapping)) or not isinstance(mounts, Iterable):
        raise ValidationError(field_name, mounts, "a list of mounts")
    out: list[Mount] = []
    seen: set[str] = set()
    for i, item in enumerate(mounts):
        where = f"{field_name}[{i}]"
        mount = mount_from_dict(item, where) if isinstance(item, Mapping) else item
        if not isinstance(mount, AzureFileShare | AzureBlobContainer | FileServer | UnmanagedFileSystem):
            raise ValidationError(
                where, item, "an AzureFileShare, AzureBlobContainer, FileServer or UnmanagedFileSystem"
            )
        if mount.relative_mount_path in seen:
            raise ValidationError(
                f"{where}.relative_mount_path", mount.relative_mount_path, "a path no other mount uses"
            )
        seen.add(mount.relative_mount_path)
        out.append(mount)
    return tuple(out)


def find(mounts: Iterable[Mount], relative_mount_path: str) -> Mount | None:
    return next((m for m in mounts if m.relative_mount_path == relative_mount_path), None)
