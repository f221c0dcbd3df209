"""Files on the client that only their owner may read (a cluster's private key, its setup secrets and mount
keys, the Azure nodes' host-key pins): written whole, through a temp file replaced atomically, and 0600
from creation, so no reader ever sees half a file and no moment leaves one readable by others."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str, *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``text``, 0600 (created so, never widened); its folder is made if missing.
    A writer killed midway leaves ``.<name>.<pid>.tmp`` beside it, never a partial ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding=encoding) as f:
        f.write(text)
    os.replace(tmp, path)
