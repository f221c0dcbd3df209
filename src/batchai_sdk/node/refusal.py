"""A node that refuses the cluster's SSH commands for a while: the ``lose_node`` fault drill on SSH nodes
(node/job/faults.py), where stopping sshd itself would need root. The drill leaves the refusal in a
private folder of the user's home (``~/.batchai-refused``, 0700), named by the node's address; every node
command started over SSH (``SSH_CONNECTION`` names the address the client reached: ``__main__.py``) then
exits 255, as ssh does when a host cannot be reached, until the refusal's time is over. Stdlib only and
nothing else imported: every node command checks it first."""

from __future__ import annotations

import os
import time

UNREACHABLE = 255  # ssh's own exit status when it cannot reach the host


def folder() -> str:
    return os.path.join(os.path.expanduser("~"), ".batchai-refused")


def path(address: str) -> str:
    return os.path.join(folder(), address.replace("/", "_"))


def refuse(address: str, seconds: float) -> None:
    """Refuse the cluster's SSH commands reaching ``address`` for ``seconds`` from now."""
    os.makedirs(folder(), mode=0o700, exist_ok=True)
    tmp = f"{path(address)}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{time.time() + seconds:.3f}\n")
    os.replace(tmp, path(address))


def server_address(environ: dict[str, str] | None = None) -> str | None:
    """The address an SSH client reached this process's session on (``SSH_CONNECTION``'s third word)."""
    words = (environ if environ is not None else os.environ).get("SSH_CONNECTION", "").split()
    return words[2] if len(words) == 4 else None


def refused() -> bool:
    """Whether this process came in over SSH to an address that refuses the cluster's commands now."""
    address = server_address()
    if address is None:
        return False
    try:
        with open(path(address), encoding="utf-8") as f:
            until = float(f.read().strip())
    except (OSError, ValueError):
        return False
    return until > time.time()
