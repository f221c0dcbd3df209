"""The per-cluster SSH key pair that lets mpirun on the head node reach the other nodes.

Generated on the client, kept there 0600, installed on every node of the cluster by node setup.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..._private_files import write_private
from ...exceptions import BackendError


@dataclass(frozen=True)
class ClusterKey:
    private_openssh: str  # never logged, never in a record
    public_line: str  # "ssh-ed25519 AAAA... <comment>"

    def __repr__(self) -> str:
        return f"ClusterKey({self.public_line!r})"


def generate(comment: str) -> ClusterKey:
    key = Ed25519PrivateKey.generate()
    return _from_private(key, comment)


def _from_private(key: Ed25519PrivateKey, comment: str) -> ClusterKey:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode("ascii")
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return ClusterKey(private, f"{public.decode('ascii')} {comment}")


def parse(private_openssh: str, comment: str) -> ClusterKey:
    try:
        key = serialization.load_ssh_private_key(private_openssh.encode("ascii"), password=None)
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise BackendError("a cluster key file is not an unencrypted OpenSSH ed25519 key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BackendError("a cluster key file is not an ed25519 key")
    return _from_private(key, comment)


def load(path: Path, comment: str) -> ClusterKey | None:
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    return parse(text, comment)


def save(path: Path, key: ClusterKey) -> None:
    """Write the private key 0600 (created so, never widened) and the public key next to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    write_private(path, key.private_openssh, encoding="ascii")
    path.with_name(path.name + ".pub").write_text(key.public_line + "\n", encoding="ascii")
