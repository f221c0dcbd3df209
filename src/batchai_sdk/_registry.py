"""What the ``batchai`` CLI keeps on this machine: the profile and the resource groups it knows.

::

    $BATCHAI_HOME/profile.json                     backend for new workspaces, its options, defaults
    $BATCHAI_HOME/groups/<group>/group.json        location, workspaces (backend, options), storage accounts
    $BATCHAI_HOME/groups/<group>/workspaces/<ws>/  a local workspace's root (share, records, temp)

``$BATCHAI_HOME`` defaults to ``~/.batchai``. A resource group is a name space of workspaces and storage
accounts; every workspace remembers the backend it was created with, so changing the profile later only
affects new workspaces. No secret is ever written here: SSH key *paths* and Azure subscription ids only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ._models import utcnow
from .exceptions import AlreadyExistsError, BatchAIError, NotFoundError, ValidationError

BACKENDS = ("local", "ssh", "azure", "slurm")
GROUP_RE = re.compile(r"[-\w.()]{1,90}")
ACCOUNT_RE = re.compile(r"[a-z0-9]{3,24}")
SHARE_RE = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?!-)){1,61}[a-z0-9]")


def batchai_home() -> Path:
    return Path(os.environ.get("BATCHAI_HOME") or "~/.batchai").expanduser()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BatchAIError(f"cannot read {path}: {exc}") from exc


def validate_group(name: str) -> str:
    if not GROUP_RE.fullmatch(name) or name.endswith("."):
        raise ValidationError(
            "resource group", name, "1-90 letters, digits, '-', '_', '.', '(' or ')', not ending with '.'"
        )
    return name


def validate_account(name: str) -> str:
    if not ACCOUNT_RE.fullmatch(name):
        raise ValidationError("storage account name", name, "3-24 lowercase letters and digits")
    return name


def validate_share(name: str) -> str:
    if not SHARE_RE.fullmatch(name):
        raise ValidationError(
            "share name", name, "3-63 lowercase letters, digits and single hyphens, not at either end"
        )
    return name


class Profile:
    """``profile.json``: ``backend`` for new workspaces, per-backend options, ``defaults``."""

    def __init__(self, home: Path) -> None:
        self.path = home / "profile.json"
        data = _read_json(self.path)
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}

    @property
    def backend(self) -> str:
        kind = self.data.get("backend") or "local"
        if kind not in BACKENDS:
            raise BatchAIError(f"{self.path}: backend {kind!r} is not one of {', '.join(BACKENDS)}")
        return str(kind)

    def options(self, kind: str) -> dict[str, Any]:
        value = self.data.get(kind) or {}
        if not isinstance(value, dict):
            raise BatchAIError(f"{self.path}: {kind!r} should hold an object of options")
        return dict(value)

    def default(self, key: str) -> str | None:
        value = (self.data.get("defaults") or {}).get(key)
        return str(value) if value not in (None, "") else None

    def save(self) -> None:
        _write_json(self.path, self.data)


class Registry:
    """The resource groups under ``$BATCHAI_HOME/groups``; one ``group.json`` per group."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "groups"

    # -- groups ---------------------------------------------------------------------------------------
    def group_dir(self, name: str) -> Path:
        return self.root / validate_group(name)

    def _record_path(self, name: str) -> Path:
        return self.group_dir(name) / "group.json"

    def get_group(self, name: str) -> dict[str, Any]:
        data = _read_json(self._record_path(name))
        if not isinstance(data, dict):
            raise NotFoundError(
                "resource group", name, f"{self.root} (create it with: batchai group create --name {name})"
            )
        return data

    def group_exists(self, name: str) -> bool:
        return self._record_path(name).is_file()

    def create_group(self, name: str, location: str) -> dict[str, Any]:
        if self.group_exists(name):
            data = self.get_group(name)
            if data.get("location") != location:
                raise AlreadyExistsError(
                    "resource group", name, f"location {data.get('location')!r} (asked for {location!r})"
                )
            return data
        data = {"name": name, "location": location, "created": utcnow().isoformat(), "workspaces": {},
                "storageAccounts": {}}  # fmt: skip
        _write_json(self._record_path(name), data)
        return data

    def save_group(self, data: dict[str, Any]) -> None:
        _write_json(self._record_path(data["name"]), data)

    def list_groups(self) -> list[dict[str, Any]]:
        if not self.root.is_dir():
            return []
        out = []
        for child in sorted(self.root.iterdir()):
            data = _read_json(child / "group.json") if child.is_dir() else None
            if isinstance(data, dict):
                out.append(data)
        return out

    def remove_group(self, name: str) -> None:
        """Forget the group and remove its folder (local workspaces' roots live there)."""
        shutil.rmtree(self.group_dir(name), ignore_errors=True)

    # -- workspaces -----------------------------------------------------------------------------------
    def local_root(self, group: str, workspace: str) -> Path:
        return self.group_dir(group) / "workspaces" / workspace

    def workspace_entry(self, group: str, workspace: str) -> dict[str, Any]:
        entry = self.get_group(group).get("workspaces", {}).get(workspace)
        if not isinstance(entry, dict):
            raise NotFoundError("workspace", workspace, f"resource group {group!r}")
        return entry

    # -- storage accounts -----------------------------------------------------------------------------
    def find_account(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(group record, account record) of a storage account; its name is unique across groups."""
        for group in self.list_groups():
            account = group.get("storageAccounts", {}).get(name)
            if isinstance(account, dict):
                return group, account
        raise NotFoundError(
            "storage account",
            name,
            "any resource group (create it with: batchai storage account create -g GROUP --name NAME)",
        )
