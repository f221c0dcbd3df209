"""The SSH workspace's share as the client sees it: ``share_path`` on the first host, through SFTP; on the
next host that answers once that one stops answering (every host sees the share at the same path)."""

from __future__ import annotations

import errno
import logging
import posixpath
import shlex
import stat as stat_mod
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from ..._models import FileInfo
from ...exceptions import (
    BackendError,
    HostKeyError,
    NotFoundError,
    ShareError,
    SSHAuthenticationError,
    SSHError,
)
from ...remote.ssh import SSHRunner
from ...share import Progress, Share, copy_stream, normalize

_CHUNK = 1 << 20
T = TypeVar("T")
log = logging.getLogger(__name__)


class _HostDown(ShareError):
    """The share's host did not answer (no connection, or a request timed out): another host may."""


def _missing(exc: OSError) -> bool:
    return isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT


class SFTPShare(Share):
    """A directory on a remote machine (``root``), reached through ``runner``'s SFTP session.

    Writes go to a temporary name first and are renamed over the target (``posix-rename``), so a reader
    on any node sees the old file or the new one, never half of it. ``others`` gives the runners of the
    other hosts that see the same folder at ``root``: a request the current host does not answer (its
    connection fails, or the request times out) is made on the first of them that answers, which serves
    from then on (the head node powered off must not take the share's records with it).
    """

    def __init__(
        self,
        runner: SSHRunner,
        root: str,
        name: str | None = None,
        *,
        others: Callable[[], Sequence[SSHRunner]] | None = None,
    ) -> None:
        self.runner = runner
        self._others = others
        self.root = posixpath.normpath(root)
        self.name = name or posixpath.basename(self.root) or "share"
        self._lock = threading.RLock()
        self._resolved_root: str | None = None

    def __repr__(self) -> str:
        return f"SFTPShare({self.runner.host}:{self.root!r})"

    def _real_root(self, sftp: paramiko.SFTPClient) -> str:
        """The share's root with its symbolic links resolved (the server's realpath), asked once."""
        if self._resolved_root is None:
            self._resolved_root = sftp.normalize(self.root)
        return self._resolved_root

    def _real(self, sftp: paramiko.SFTPClient, remote: str) -> str | None:
        """The share path ``remote`` resolves to on the server; None out of the share or dangling."""
        root = self._real_root(sftp)
        try:
            real = sftp.normalize(remote)
        except OSError:
            return None  # a dangling link leads nowhere in the share
        if real == root:
            return ""
        return real[len(root.rstrip("/")) + 1 :] if real.startswith(root.rstrip("/") + "/") else None

    def real_path(self, path: str) -> str | None:
        return self._call("resolve", path, lambda s: self._real(s, self.remote_path(path)))

    def link_targets(self, path: str) -> dict[str, str | None]:
        target = self.remote_path(path)

        def links(sftp: paramiko.SFTPClient) -> dict[str, str | None]:
            return {
                a.filename: self._real(sftp, posixpath.join(target, a.filename))
                for a in sftp.listdir_attr(target)
                if stat_mod.S_ISLNK(a.st_mode or 0)
            }

        return self._call("list", path, links)

    def remote_path(self, path: str) -> str:
        rel = normalize(path)
        return posixpath.join(self.root, rel) if rel else self.root

    @contextmanager
    def _session(self, what: str, path: str) -> Iterator[paramiko.SFTPClient]:
        """The SFTP session under one lock (paramiko's SFTP client is not meant for concurrent
        requests), with connection failures turned into ShareError."""
        with self._lock:
            try:
                sftp = self.runner.sftp()
            except (HostKeyError, SSHAuthenticationError):
                raise  # the share is fine: the login is what to fix, and the error says how
            except BackendError as exc:
                raise _HostDown(f"share {self.name!r} is unreachable: {exc}", path) from exc
            yield sftp

    def _call(self, what: str, path: str, fn: Callable[[paramiko.SFTPClient], T]) -> T:
        try:
            return self._call_here(what, path, fn)
        except _HostDown as exc:
            if not self._fail_over(exc):
                raise
        return self._call_here(what, path, fn)

    def _fail_over(self, why: ShareError) -> bool:
        """Serve from the first other host that answers; False when none does (or there is none)."""
        with self._lock:
            for runner in self._others() if self._others is not None else ():
                if runner is self.runner:
                    continue
                try:
                    runner.sftp()
                except BackendError:
                    continue
                log.warning("share %s: %s; using %s from now on", self.name, why, runner.where())
                self.runner, self._resolved_root = runner, None
                return True
            return False

    def _call_here(self, what: str, path: str, fn: Callable[[paramiko.SFTPClient], T]) -> T:
        for attempt in (1, 2):
            with self._session(what, path) as sftp:
                channel = sftp.get_channel()
                try:
                    # a host that does not answer a keepalive once the request waited a few seconds is gone
                    # (remote/liveness.py): the next host serves in seconds, not after io_timeout
                    with self.runner.watch(channel.get_transport() if channel is not None else None):
                        return fn(sftp)
                except SSHError as exc:
                    self.runner.drop()
                    raise _HostDown(f"{what} {path!r} on share {self.name!r}: {exc}", path) from exc
                except TimeoutError as exc:  # the host stopped answering: never wait on it unbounded
                    waited = channel.gettimeout() if channel is not None else None
                    self.runner.drop()
                    raise _HostDown(
                        f"{what} {path!r} on share {self.name!r}: its host {self.runner.where()} did not"
                        f" answer within {waited or self.runner.io_timeout:.3g} s",
                        path,
                    ) from exc
                except OSError as exc:
                    if _missing(exc):
                        raise NotFoundError("file", normalize(path) or "/", f"share {self.name!r}") from exc
                    if exc.errno is None and attempt == 1 and not self.runner.connected:
                        continue  # the connection broke ("Socket is closed"): reconnect once
                    raise ShareError(f"{what} {path!r} on share {self.name!r} failed: {exc}", path) from exc
                except (EOFError, paramiko.SSHException) as exc:
                    if attempt == 1 and not self.runner.connected:
                        continue
                    raise ShareError(f"{what} {path!r} on share {self.name!r} failed: {exc}", path) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # -- primitives ----------------------------------------------------------------------------------
    def stat(self, path: str) -> FileInfo | None:
        try:
            attrs = self._call("stat", path, lambda s: s.stat(self.remote_path(path)))
        except NotFoundError:
            return None
        return _info(posixpath.basename(normalize(path)), attrs)

    def list(self, path: str = "") -> list[FileInfo]:
        target = self.remote_path(path)

        def listing(sftp: paramiko.SFTPClient) -> list[paramiko.SFTPAttributes]:
            if not stat_mod.S_ISDIR(sftp.stat(target).st_mode or 0):
                raise FileNotFoundError(errno.ENOENT, "not a directory", target)
            return sftp.listdir_attr(target)

        try:
            entries = self._call("list", path, listing)
        except NotFoundError:
            raise NotFoundError("directory", normalize(path) or "/", f"share {self.name!r}") from None
        return sorted((_info(a.filename, a) for a in entries), key=lambda i: i.name)

    def _mkdir_one(self, path: str) -> None:
        remote = self.remote_path(normalize(path))

        def make(sftp: paramiko.SFTPClient) -> bool:
            try:
                sftp.mkdir(remote)  # mkdir(2) on the server: atomic
            except OSError:
                sftp.stat(remote)  # FileNotFoundError (a parent is missing) goes on as a share error
                return False
            return True

        if not self._call("mkdir", path, make):
            raise FileExistsError(path)

    def mkdir(self, path: str) -> None:
        rel = normalize(path)

        def make(sftp: paramiko.SFTPClient) -> None:
            missing: list[str] = []
            current = self.remote_path(rel) if rel else self.root
            while current not in ("/", ""):  # the share's root itself is made too when missing
                try:
                    if not stat_mod.S_ISDIR(sftp.stat(current).st_mode or 0):
                        raise ShareError(f"{current!r} exists and is not a directory", rel)
                    break
                except FileNotFoundError:
                    missing.append(current)
                    current = posixpath.dirname(current)
            for directory in reversed(missing):
                try:
                    sftp.mkdir(directory)
                except OSError:
                    # made meanwhile by someone else is fine
                    if not stat_mod.S_ISDIR(sftp.stat(directory).st_mode or 0):
                        raise

        self._call("mkdir", rel, make)

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        target = self.remote_path(path)

        def read(sftp: paramiko.SFTPClient) -> bytes:
            if stat_mod.S_ISDIR(sftp.stat(target).st_mode or 0):
                raise FileNotFoundError(errno.ENOENT, "is a directory", target)
            with sftp.open(target, "rb") as f:
                if length is None:
                    f.prefetch()
                f.seek(offset)
                return bytes(f.read() if length is None else f.read(length))

        if length is not None and length <= 0:
            if self.stat(path) is None:
                raise NotFoundError("file", normalize(path), f"share {self.name!r}")
            return b""
        return self._call("read", path, read)

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write(path, data, private=False)

    def write_private(self, path: str, data: bytes) -> None:
        self._write(path, data, private=True)

    def _write(self, path: str, data: bytes, *, private: bool) -> None:
        rel = normalize(path)
        parent = posixpath.dirname(rel)
        if parent:
            self.mkdir(parent)
        target = self.remote_path(rel)
        tmp = _temp_name(target, "tmp")

        def write(sftp: paramiko.SFTPClient) -> None:
            try:
                with sftp.open(tmp, "wb") as f:
                    f.chmod(0o600)  # nobody else reads the data while it is written (maybe a secret)
                    f.set_pipelined(True)
                    f.write(data)
                if not private:
                    sftp.chmod(tmp, 0o644)
                sftp.posix_rename(tmp, target)
            except BaseException:
                _remove_quietly(sftp, tmp)
                raise

        self._call("write", rel, write)

    def restrict(self, path: str) -> None:
        """Readable by its owner only (0600): the job's secret variables."""
        self._call("restrict", path, lambda sftp: sftp.chmod(self.remote_path(path), 0o600))

    def delete(self, path: str, *, recursive: bool = False) -> None:
        rel = normalize(path)
        info = self.stat(rel)
        if info is None:
            return
        target = self.remote_path(rel)
        parent = posixpath.dirname(target)
        if self._call("resolve", rel, lambda s: self._real(s, parent)) is None:
            return  # reached through a symbolic link out of the share: nothing of the share is there
        if info.is_dir and recursive:
            # one command on the head node instead of a round trip per file
            result = self.runner.run(f"rm -rf -- {shlex.quote(target)}", timeout=600)
            if not result.ok:
                raise ShareError(f"delete {rel!r} on share {self.name!r} failed: {result.describe()}", rel)
            return

        def remove(sftp: paramiko.SFTPClient) -> None:
            try:
                if info.is_dir:
                    sftp.rmdir(target)
                else:
                    sftp.remove(target)
            except FileNotFoundError:
                pass

        self._call("delete", rel, remove)

    def _upload_file(self, source: Path, path: str, progress: Progress | None) -> None:
        rel = normalize(path)
        target = self.remote_path(rel)
        tmp = _temp_name(target, "part")
        mode = stat_mod.S_IMODE(source.stat().st_mode)

        def upload(sftp: paramiko.SFTPClient) -> None:
            try:
                with source.open("rb") as src, sftp.open(tmp, "wb") as out:
                    out.set_pipelined(True)
                    copy_stream(src, out, progress, _CHUNK)
                sftp.chmod(tmp, mode)
                sftp.posix_rename(tmp, target)
            except BaseException:
                _remove_quietly(sftp, tmp)
                raise

        self._call("upload", rel, upload)

    def _download_file(self, path: str, out: Any, progress: Progress | None) -> None:
        target = self.remote_path(path)

        def download(sftp: paramiko.SFTPClient) -> None:
            with sftp.open(target, "rb") as src:
                src.prefetch()
                copy_stream(src, out, progress, _CHUNK)

        self._call("download", path, download)


def _info(name: str, attrs: paramiko.SFTPAttributes) -> FileInfo:
    is_dir = stat_mod.S_ISDIR(attrs.st_mode or 0)
    modified = datetime.fromtimestamp(attrs.st_mtime, timezone.utc) if attrs.st_mtime is not None else None
    return FileInfo(
        name=name,
        type="directory" if is_dir else "file",
        size=None if is_dir else attrs.st_size,
        modified=modified,
    )


def _temp_name(target: str, suffix: str) -> str:
    """A hidden sibling of ``target``: the same directory, so the rename stays on one filesystem."""
    directory, name = posixpath.split(target)
    return posixpath.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.{suffix}")


def _remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    try:
        sftp.remove(path)
    except (OSError, EOFError, paramiko.SSHException):
        pass
