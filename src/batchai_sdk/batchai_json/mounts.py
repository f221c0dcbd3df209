"""``mountVolumes`` of a job.json (``properties.mountVolumes``) and of a cluster.json
(``properties.nodeSetup.mountVolumes``) <-> the typed mounts of ``batchai_sdk.mounts``.

All four kinds are read: ``azureFileShares``, ``azureBlobFileSystems``, ``fileServers`` (the NFS server
is the last segment of ``fileServer.id``: the file server's name, which must resolve on the nodes) and
``unmanagedFileSystems``. In a job.json the ``azureFileShares`` entry naming the workspace's own share (the
first entry where the caller cannot tell) is the workspace share, seen at its ``relativeMountPath``; every
other entry is a mount of its own. An ``accountKey`` becomes the mount's secret ``account_key``
(never written back); a Key Vault reference is checked and dropped. Every error names the JSON path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from ..exceptions import ValidationError
from ..mounts import AzureBlobContainer, AzureFileShare, FileServer, Mount, UnmanagedFileSystem
from .reading import _error, _invalid, _missing, _Reader

_MOUNT_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_FILE_MODE_RE = re.compile(r"^0?[0-7]{3}$")
_AZURE_FILE_URL_RE = re.compile(r"^https?://([A-Za-z0-9.-]+)(?::\d+)?/([^/?#\s]+)/?$")
_KINDS = ("azureFileShares", "azureBlobFileSystems", "fileServers", "unmanagedFileSystems")
# the SDK field a mount's ValidationError names -> the JSON field it came from
_JSON_FIELDS = {
    "relative_mount_path": "relativeMountPath",
    "account_name": "accountName",
    "share_name": "azureFileUrl",
    "host": "azureFileUrl",
    "container_name": "containerName",
    "mount_options": "mountOptions",
    "server": "fileServer.id",
    "source_directory": "sourceDirectory",
    "mount_command": "mountCommand",
    "file_mode": "fileMode",
    "directory_mode": "directoryMode",
}


def _parse_mount_volumes(
    r: _Reader, value: Any, path: str, workspace_share: Callable[[AzureFileShare], bool] | None = None
) -> dict[str, Any]:
    """A job's ``mountVolumes``: ``{"mount_path": ..., "mounts": (...)}`` for ``JobSpec``.

    ``workspace_share`` says whether a file share is the workspace's own (the first one it accepts is
    seen at ``mount_path``; every other share is a mount of its own); without it the first
    ``azureFileShares`` entry is the workspace share."""
    parsed = _parse_volumes(
        r,
        value,
        path,
        workspace_share_first=workspace_share is None,
        no_url_is_workspace=workspace_share is not None,
    )
    if workspace_share is not None:
        chosen = any(m is None for _, m in parsed)
        for i, (rel, mount) in enumerate(parsed):
            if isinstance(mount, AzureFileShare) and not chosen and workspace_share(mount):
                parsed[i], chosen = (rel, None), True
    fields: dict[str, Any] = {"mounts": tuple(m for _, m in parsed if m is not None)}
    fields.update(mount_path=next((rel for rel, m in parsed if m is None), None))
    return fields


def parse_mount_volumes(r: _Reader, value: Any, path: str) -> tuple[Mount, ...]:
    """A cluster's ``nodeSetup.mountVolumes`` (``path`` is its JSON path): every entry a mount under
    ``$AZ_BATCHAI_MOUNT_ROOT``. The storage placeholders are filled by ``r`` as in a job.json."""
    return tuple(m for _, m in _parse_volumes(r, value, path, workspace_share_first=False) if m is not None)


def _parse_volumes(
    r: _Reader, value: Any, path: str, *, workspace_share_first: bool, no_url_is_workspace: bool = False
) -> list[tuple[str, Mount | None]]:
    """(relativeMountPath, mount) of every entry; mount None for the workspace share."""
    volumes = r.obj(value, path, _KINDS)
    out: list[tuple[str, Mount | None]] = []
    seen: dict[str, str] = {}
    parsers: dict[str, Callable[[_Reader, Any, str, bool], Mount | None]] = {
        "azureFileShares": _file_share,
        "azureBlobFileSystems": _blob,
        "fileServers": _file_server,
        "unmanagedFileSystems": _unmanaged,
    }
    for kind in _KINDS:
        if kind not in volumes:
            continue
        for i, item in enumerate(r.array(volumes[kind], f"{path}.{kind}")):
            where = f"{path}.{kind}[{i}]"
            first = kind == "azureFileShares" and (
                (workspace_share_first and i == 0)
                or (no_url_is_workspace and isinstance(item, dict) and "azureFileUrl" not in item)
            )
            rel = _relative_mount_path(r, item, where)
            if rel in seen:
                _invalid(
                    f"{where}.relativeMountPath", rel, f"a path no other mount uses ({seen[rel]} has it)"
                )
            seen[rel] = where
            out.append((rel, parsers[kind](r, item, where, first)))
    return out


def _relative_mount_path(r: _Reader, item: Any, where: str) -> str:
    if not isinstance(item, dict):
        _invalid(where, item, "an object")
    if "relativeMountPath" not in item:
        _missing(f"{where}.relativeMountPath", "the folder name the mount is seen under (its mount root)")
    rel = r.string(item["relativeMountPath"], f"{where}.relativeMountPath")
    if not _MOUNT_PATH_RE.fullmatch(rel):
        _invalid(
            f"{where}.relativeMountPath",
            r.shown(rel),
            "one directory name of letters, digits, '.', '_' and '-' (at most 64), such as 'myshare'",
        )
    return rel


def _build(where: str, make: Callable[[], Mount]) -> Mount:
    try:
        return make()
    except ValidationError as exc:
        field = f"{where}.{_JSON_FIELDS.get(exc.field, exc.field)}"
        raise _error(field, exc.value, exc.expected, f"invalid {field}: expected {exc.expected}") from None


def _key(r: _Reader, item: dict[str, Any], where: str, field: str = "credentials") -> str | None:
    if field not in item:
        return None
    cpath = f"{where}.{field}"
    creds = r.obj(item[field], cpath, ("accountKey", "accountKeySecretReference"))
    key = None
    if "accountKey" in creds:
        key = r.string(creds["accountKey"], f"{cpath}.accountKey", secret=True, key_allowed=True)
    if "accountKeySecretReference" in creds:
        r.key_vault_ref(creds["accountKeySecretReference"], f"{cpath}.accountKeySecretReference")
    return key


def _file_share(r: _Reader, value: Any, where: str, workspace: bool) -> Mount | None:
    keys = ("accountName", "azureFileUrl", "credentials", "relativeMountPath", "fileMode", "directoryMode")
    item = dict(r.obj(value, where, keys))
    rel = r.string(item["relativeMountPath"], f"{where}.relativeMountPath")
    modes = {}
    for mode, attr in (("fileMode", "file_mode"), ("directoryMode", "directory_mode")):
        if mode in item:
            text = r.string(item[mode], f"{where}.{mode}")
            if not _FILE_MODE_RE.fullmatch(text):
                _invalid(f"{where}.{mode}", r.shown(text), "an octal mode such as '0777'")
            modes[attr] = text
    key = _key(r, item, where)
    account = r.string(item["accountName"], f"{where}.accountName") if "accountName" in item else None
    url_match = None
    if "azureFileUrl" in item:
        url = r.string(item["azureFileUrl"], f"{where}.azureFileUrl")
        url_match = _AZURE_FILE_URL_RE.fullmatch(url)
        if not url_match:
            _invalid(
                f"{where}.azureFileUrl",
                r.shown(url),
                "a URL like https://<account>.file.core.windows.net/<share>",
            )
    if workspace:
        return None  # the workspace share: mounted with the workspace's own credentials
    if url_match is None:
        _missing(f"{where}.azureFileUrl", "the share's URL, https://<account>.file.core.windows.net/<share>")
    host, share = url_match.group(1), url_match.group(2)
    default_host = host.endswith(".file.core.windows.net")
    if account is None:
        if not default_host:
            _missing(f"{where}.accountName", f"the storage account of {host}")
        account = host.split(".", 1)[0]
    return _build(
        where,
        lambda: AzureFileShare(
            relative_mount_path=rel,
            account_name=account,
            share_name=share,
            host=None if host == f"{account}.file.core.windows.net" else host,
            account_key=key,
            **modes,
        ),
    )


def _blob(r: _Reader, value: Any, where: str, _: bool) -> Mount:
    keys = ("accountName", "containerName", "credentials", "relativeMountPath", "mountOptions")
    item = dict(r.obj(value, where, keys))
    for required in ("accountName", "containerName"):
        if required not in item:
            _missing(
                f"{where}.{required}", "the storage account" if required == "accountName" else "the container"
            )
    account = r.string(item["accountName"], f"{where}.accountName")
    container = r.string(item["containerName"], f"{where}.containerName")
    options = _options(r, item, where)
    key = _key(r, item, where)
    rel = r.string(item["relativeMountPath"], f"{where}.relativeMountPath")
    return _build(
        where,
        lambda: AzureBlobContainer(
            relative_mount_path=rel,
            account_name=account,
            container_name=container,
            mount_options=options,
            account_key=key,
        ),
    )


def _options(r: _Reader, item: dict[str, Any], where: str) -> str | None:
    """``mountOptions``; an empty string (Batch AI's documentation examples write ``""``) is none."""
    if "mountOptions" not in item:
        return None
    return r.string(item["mountOptions"], f"{where}.mountOptions", nonempty=False).strip() or None


def _file_server(r: _Reader, value: Any, where: str, _: bool) -> Mount:
    item = dict(r.obj(value, where, ("fileServer", "sourceDirectory", "relativeMountPath", "mountOptions")))
    if "fileServer" not in item:
        _missing(f"{where}.fileServer", "an object with the file server's resource id")
    ref = r.obj(item["fileServer"], f"{where}.fileServer", ("id",))
    if "id" not in ref:
        _missing(f"{where}.fileServer.id", "the file server's resource id")
    server = r.string(ref["id"], f"{where}.fileServer.id").rstrip("/").rsplit("/", 1)[-1]
    source = (
        r.string(item["sourceDirectory"], f"{where}.sourceDirectory") if "sourceDirectory" in item else None
    )
    if source is not None and not source.startswith("/"):
        source = f"/data/{source}"  # a folder of the file server's export
    options = _options(r, item, where)
    rel = r.string(item["relativeMountPath"], f"{where}.relativeMountPath")
    return _build(
        where,
        lambda: FileServer(
            relative_mount_path=rel, server=server, source_directory=source, mount_options=options
        ),
    )


def _unmanaged(r: _Reader, value: Any, where: str, _: bool) -> Mount:
    item = dict(r.obj(value, where, ("mountCommand", "relativeMountPath")))
    if "mountCommand" not in item:
        _missing(f"{where}.mountCommand", "the command that mounts it (the mount point is appended)")
    command = r.string(item["mountCommand"], f"{where}.mountCommand")
    rel = r.string(item["relativeMountPath"], f"{where}.relativeMountPath")
    return _build(where, lambda: UnmanagedFileSystem(relative_mount_path=rel, mount_command=command))


def mount_volumes_json(
    mounts: Sequence[Mount], *, workspace_share: str | None = None, storage_account: str | None = None
) -> dict[str, Any]:
    """``mountVolumes`` for ``mounts`` (no account key is written); ``workspace_share`` (a job's
    ``mount_path``) comes first among the file shares."""
    out: dict[str, list[dict[str, Any]]] = {kind: [] for kind in _KINDS}
    if workspace_share is not None:
        share: dict[str, Any] = {"relativeMountPath": workspace_share}
        if storage_account is not None:
            url = f"https://{storage_account}.file.core.windows.net/{workspace_share}"
            share = {"azureFileUrl": url, **share}
        out["azureFileShares"].append(share)
    for m in mounts:
        if isinstance(m, AzureFileShare):
            entry: dict[str, Any] = {
                "accountName": m.account_name,
                "azureFileUrl": f"https://{m.file_host}/{m.share_name}",
                "relativeMountPath": m.relative_mount_path,
            }
            if (m.file_mode, m.directory_mode) != ("0777", "0777"):
                entry.update(fileMode=m.file_mode, directoryMode=m.directory_mode)
            out["azureFileShares"].append(entry)
        elif isinstance(m, AzureBlobContainer):
            entry = {"accountName": m.account_name, "containerName": m.container_name}
            entry["relativeMountPath"] = m.relative_mount_path
            if m.mount_options:
                entry["mountOptions"] = m.mount_options
            out["azureBlobFileSystems"].append(entry)
        elif isinstance(m, FileServer):
            entry = {"fileServer": {"id": m.server}, "relativeMountPath": m.relative_mount_path}
            if m.source_directory:
                entry["sourceDirectory"] = m.source_directory
            if m.mount_options:
                entry["mountOptions"] = m.mount_options
            out["fileServers"].append(entry)
        else:
            out["unmanagedFileSystems"].append(
                {"mountCommand": m.mount_command, "relativeMountPath": m.relative_mount_path}
            )
    return {kind: entries for kind, entries in out.items() if entries}
