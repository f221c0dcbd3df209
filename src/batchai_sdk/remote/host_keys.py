"""Pinned SSH host keys: an OpenSSH ``known_hosts`` file that decides which servers we talk to.

An unknown key is refused unless trust on first use is on (then it is recorded, and pinned from then
on); a key that differs from the pinned one is always refused. Entries use OpenSSH's spelling
(``host`` on port 22, ``[host]:port`` otherwise) so the same file serves ``ssh -o UserKnownHostsFile``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

import paramiko

from ..exceptions import HostKeyError


def known_hosts_name(host: str, port: int) -> str:
    """How OpenSSH names ``host:port`` in known_hosts."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """``SHA256:...``, as ``ssh-keygen -lf`` prints it."""
    return str(key.fingerprint)


class HostKeyStore:
    """A known_hosts file of pinned keys, safe to share between threads connecting in parallel.

    Only this file is consulted — never ``~/.ssh/known_hosts`` implicitly — so what a workspace trusts
    is visible in one place.
    """

    def __init__(self, path: str | os.PathLike[str], *, trust_on_first_use: bool = False) -> None:
        self.path = Path(path).expanduser()
        self.trust_on_first_use = trust_on_first_use
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HostKeyStore({str(self.path)!r}, trust_on_first_use={self.trust_on_first_use})"

    def _load(self) -> paramiko.HostKeys:
        keys = paramiko.HostKeys()
        if self.path.exists():
            try:
                keys.load(str(self.path))
            except (OSError, paramiko.SSHException) as exc:
                raise HostKeyError(str(self.path), f"cannot read known_hosts file: {exc}") from exc
        return keys

    def keys_for(self, name: str) -> dict[str, paramiko.PKey]:
        """Pinned keys of one known_hosts name, by key type."""
        with self._lock:
            entry = self._load().lookup(name)
        return dict(entry.items()) if entry is not None else {}

    def check(self, name: str, key: paramiko.PKey) -> None:
        """Accept ``key`` for ``name`` or raise ``HostKeyError``; records it under TOFU."""
        with self._lock:
            pinned = self._load().lookup(name)
            if pinned is not None:
                same_type = pinned.get(key.get_name())
                if same_type is not None and same_type == key:
                    return
                # A key of another type than the pinned one is refused too, even under TOFU: it would
                # let a server that cannot show the pinned key in.
                raise changed_key_error(name, key, same_type or next(iter(pinned.values())), self.path)
            elif not self.trust_on_first_use:
                raise HostKeyError(
                    name,
                    f"unknown host key (not in {self.path}); verify the fingerprint and add the key to "
                    "known_hosts, or pass trust_on_first_use=True to record it on first connection",
                    fingerprint(key),
                )
            self._append(name, key)

    def pin(self, name: str, key: paramiko.PKey) -> None:
        """Record ``key`` for ``name`` (refused if a different key of that type is pinned)."""
        with self._lock:
            pinned = self._load().lookup(name)
            existing = pinned.get(key.get_name()) if pinned is not None else None
            if existing is not None:
                if existing != key:
                    raise changed_key_error(name, key, existing, self.path)
                return
            self._append(name, key)

    def _append(self, name: str, key: paramiko.PKey) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with self.path.open("a", encoding="ascii") as f:
            f.write(line)

    def known_hosts_text(self, names: Iterable[str]) -> str:
        """The pinned lines of ``names``, for a node-local known_hosts file (public keys only)."""
        with self._lock:
            keys = self._load()
        lines = []
        for name in names:
            entry = keys.lookup(name)
            if entry is None:
                continue
            for keytype, key in sorted(entry.items()):
                lines.append(f"{name} {keytype} {key.get_base64()}")
        return "".join(line + "\n" for line in lines)

    def policy(self) -> paramiko.MissingHostKeyPolicy:
        return _PinningPolicy(self)

    def prime(self, client: paramiko.SSHClient, name: str) -> None:
        """Give ``client`` the pinned keys of ``name``: paramiko then negotiates that key type and
        raises BadHostKeyException on a mismatch; with none pinned it asks ``policy``."""
        known = client.get_host_keys()
        for keytype, key in self.keys_for(name).items():
            known.add(name, keytype, key)
        client.set_missing_host_key_policy(self.policy())


class _PinningPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, store: HostKeyStore) -> None:
        self.store = store

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.store.check(hostname, key)


def changed_key_error(name: str, offered: paramiko.PKey, pinned: paramiko.PKey, path: Path) -> HostKeyError:
    return HostKeyError(
        name,
        f"the host key CHANGED: the server offered a key other than the one pinned in {path} "
        f"(pinned {pinned.get_name()} {fingerprint(pinned)}). This can be a man-in-the-middle attack; "
        f"if the machine was reinstalled, verify its new key and remove the old line from {path}",
        fingerprint(offered),
    )
