"""The setup task's secrets (Batch AI's ``setupTask.secrets``, ``ClusterSpec.node_setup_secrets``) where the
SSH backend keeps the cluster's key pair: a setup task runs again on every node that joins, so the values
live with the cluster, in its secrets place, and nowhere else.

- On the client: ``<state_dir>/clusters/<cluster>/setup-secrets.json``, 0600 in a 0700 folder, beside the
  cluster's private key (the Azure VM-scale-set engine's SSH state is under its own state folder).
- On every node: ``<node_dir>/clusters/<cluster>/setup-secrets.env`` (0600, the cluster's 0700 folder),
  written by node setup from its stdin, and sourced (``export NAME='value'`` lines) only by the subshell
  that runs the cluster's ``node_setup``: the values are in that command's environment, never in an argv.

A client that did not create the cluster reads them back from the head node, as it does the cluster key.
``cluster delete`` removes both (the node folder with the key; the client file with its folder).

The keys of the cluster's mounts (``AzureFileShare``/``AzureBlobContainer.account_key``, which no record
holds) are kept the same way on the client, ``mount-keys.json`` (relative mount path → key), so that every
later submit from this client can mount them on a node that joins; the nodes hold them only in the mount
script's own 0600 credential files.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from ..._private_files import write_private
from ...exceptions import BackendError

CLIENT_FILE = "setup-secrets.json"
MOUNT_KEYS = "mount-keys.json"
NODE_FILE = "setup-secrets.env"


def save(folder: Path, secrets: Mapping[str, str], *, name: str = CLIENT_FILE) -> None:
    """Write ``secrets`` to the client's secrets place (0600 from creation, replaced atomically)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    write_private(folder / name, json.dumps(dict(secrets)))


def load(folder: Path, *, name: str = CLIENT_FILE) -> dict[str, str] | None:
    """The values kept on this client, or None when there are none."""
    path = folder / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        raise BackendError(f"{path} is not a JSON object of secrets") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise BackendError(f"{path} is not a JSON object of secrets")
    return {str(k): v for k, v in data.items()}


def remove(folder: Path) -> None:
    """Both files, and a temp file a killed ``save`` left behind (``write_private``'s)."""
    for name in (CLIENT_FILE, MOUNT_KEYS):
        (folder / name).unlink(missing_ok=True)
        for tmp in folder.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def env_text(secrets: Mapping[str, str]) -> str:
    """The node file: one ``export NAME='value'`` line per secret (shell-quoted; names are validated)."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items()))


def parse_env(text: str) -> dict[str, str]:
    """``env_text`` read back (from the head node, by a client that did not create the cluster)."""
    try:
        words = shlex.split(text)  # a value may hold newlines: split the whole text, not lines
    except ValueError:
        raise BackendError("the head node's setup secrets file cannot be read") from None
    out: dict[str, str] = {}
    for verb, assignment in zip(words[::2], words[1::2], strict=False):
        name, sep, value = assignment.partition("=")
        if verb != "export" or not sep:
            raise BackendError("the head node's setup secrets file cannot be read")
        out[name] = value
    return out
