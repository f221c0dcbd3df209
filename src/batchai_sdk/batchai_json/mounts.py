"""``mountVolumes`` of a job.json: the workspace's file share, seen under ``$AZ_BATCHAI_JOB_MOUNT_ROOT``."""

from __future__ import annotations

import re
from typing import Any

from .reading import _error, _invalid, _missing, _Reader

_MOUNT_PATH_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_FILE_MODE_RE = re.compile(r"^0?[0-7]{3}$")
_AZURE_FILE_URL_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(?::\d+)?/([^/?#\s]+)/?$")
_ONE_SHARE = "not supported; only the workspace's file share can be mounted (mountVolumes.azureFileShares)"
_MOUNT_UNSUPPORTED = {
    "azureBlobFileSystems": _ONE_SHARE,
    "fileServers": _ONE_SHARE,
    "unmanagedFileSystems": _ONE_SHARE,
}


def _parse_mount_volumes(r: _Reader, value: Any, path: str) -> str | None:
    volumes = r.obj(value, path, ("azureFileShares",), _MOUNT_UNSUPPORTED)
    if "azureFileShares" not in volumes:
        return None
    shares = r.array(volumes["azureFileShares"], f"{path}.azureFileShares")
    if len(shares) > 1:
        where = f"{path}.azureFileShares[1]"
        raise _error(
            where,
            None,
            "a single file share",
            f"{where}: only one file share (the workspace's) can be mounted; remove the others",
        )
    if not shares:
        return None
    return _parse_file_share(r, shares[0], f"{path}.azureFileShares[0]")


def _parse_file_share(r: _Reader, value: Any, path: str) -> str:
    share = r.obj(
        value,
        path,
        ("accountName", "azureFileUrl", "credentials", "relativeMountPath", "fileMode", "directoryMode"),
    )
    if "relativeMountPath" not in share:
        _missing(
            f"{path}.relativeMountPath",
            "the directory name the share is seen under $AZ_BATCHAI_JOB_MOUNT_ROOT",
        )
    mount_path = r.string(share["relativeMountPath"], f"{path}.relativeMountPath")
    if not _MOUNT_PATH_RE.fullmatch(mount_path):
        _invalid(
            f"{path}.relativeMountPath",
            r.shown(mount_path),
            "one directory name of letters, digits, '.', '_' and '-' (at most 64), such as 'myshare'",
        )
    if "azureFileUrl" in share:
        url = r.string(share["azureFileUrl"], f"{path}.azureFileUrl")
        if not _AZURE_FILE_URL_RE.fullmatch(url):
            _invalid(
                f"{path}.azureFileUrl",
                r.shown(url),
                "a URL like https://<account>.file.core.windows.net/<share>",
            )
    if "accountName" in share:
        r.string(share["accountName"], f"{path}.accountName")
    for mode in ("fileMode", "directoryMode"):
        if mode in share:
            text = r.string(share[mode], f"{path}.{mode}")
            if not _FILE_MODE_RE.fullmatch(text):
                _invalid(f"{path}.{mode}", r.shown(text), "an octal mode such as '0777'")
    if "credentials" in share:
        cpath = f"{path}.credentials"
        creds = r.obj(share["credentials"], cpath, ("accountKey", "accountKeySecretReference"))
        if "accountKey" in creds:
            r.string(creds["accountKey"], f"{cpath}.accountKey", secret=True, key_allowed=True)
        if "accountKeySecretReference" in creds:
            r.key_vault_ref(creds["accountKeySecretReference"], f"{cpath}.accountKeySecretReference")
    return mount_path
