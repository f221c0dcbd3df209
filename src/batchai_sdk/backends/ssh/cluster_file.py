"""One file describes an SSH cluster: hosts, user, key, the nodes' Python, the share — as SkyPilot's
``ssh_node_pools.yaml`` and Ray's ``cluster.yaml`` do, so a lab's machines are written down once and
``Workspace.ssh_from_file`` and ``batchai workspace create --cluster-file`` read the same thing.

::

    # lab.yaml
    hosts: [10.0.0.4, 10.0.0.5]     # the first is the head node
    user: azureuser
    key_file: ~/.ssh/id_ed25519
    share_path: /mnt/share/lab      # a folder every host sees
    python: /opt/venv/bin/python3   # optional: any other keyword of Workspace.ssh
    tcp_interface: eth0

YAML (``.yaml``/``.yml``) or JSON (``.json``). Keys are ``Workspace.ssh``'s keywords (``-`` may stand for
``_``); ``name`` is the workspace's name. An unknown key is an error naming it, with the keys there are.
Relative ``key_file``, ``known_hosts`` and ``state_dir`` paths are read from the file's folder.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
from pathlib import Path
from typing import Any

from ...exceptions import NotFoundError, ValidationError

PATH_KEYS = ("key_file", "known_hosts", "state_dir")


def option_names() -> tuple[str, ...]:
    """Every keyword ``Workspace.ssh`` passes on to the SSH backend."""
    from .backend import SSHBackend

    params = inspect.signature(SSHBackend.__init__).parameters
    return tuple(n for n, p in params.items() if n not in ("self", "name") and p.kind is p.KEYWORD_ONLY)


def _parse(source: Path, text: str) -> Any:
    if source.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValidationError("cluster file", str(source), f"valid JSON ({exc})") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:  # its message says the line and column
        raise ValidationError("cluster file", str(source), f"valid YAML ({exc})") from None


def load_cluster_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file's options, checked: ``{"name": ..., "hosts": [...], "user": ..., ...}``."""
    source = Path(path).expanduser()
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError("cluster file", str(source)) from None
    data = _parse(source, text)
    if not isinstance(data, dict):
        raise ValidationError("cluster file", str(source), "a mapping of Workspace.ssh options (hosts: ...)")
    known = ("name", *option_names())
    options: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValidationError(f"{source.name}: {raw_key}", value, f"one of {', '.join(known)}{hint}")
        options[key] = value
    for key in ("hosts", "user", "share_path"):
        if key not in options:
            raise ValidationError(f"{source.name}: {key}", None, f"{key} (every cluster file names it)")
    for key in PATH_KEYS:
        if isinstance(options.get(key), str):
            options[key] = str((source.parent / os.path.expanduser(options[key])).resolve())
    return options
