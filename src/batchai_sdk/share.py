"""The workspace's file share as the client sees it: a directory, an SFTP path, or an Azure file share.

Paths are POSIX, relative to the share's root, and never escape it. Every implementation provides the
small set of primitives at the bottom of ``Share``; directory uploads, JSON records and text helpers
are built on them once, here.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import _progress
from ._models import FileInfo
from .exceptions import NotFoundError, ShareError, ValidationError

Progress = Callable[[int], None]  # called with the number of bytes just transferred


def normalize(path: str | os.PathLike[str]) -> str:
    """``"a//b/./c/"`` → ``"a/b/c"``; ``""`` is the root. Refuses absolute paths and ``..`` escapes."""
    raw = os.fspath(path).replace("\\", "/")
    if raw.startswith("/"):
        raise ValidationError("path", raw, "a path relative to the share's root")
    norm = posixpath.normpath(raw) if raw else ""
    if norm in (".", ""):
        return ""
    if norm == ".." or norm.startswith("../"):
        raise ValidationError("path", raw, "a path inside the share (no '..' above its root)")
    return norm


def join(*parts: str) -> str:
    return normalize(posixpath.join(*[p for p in parts if p]))


class Share(ABC):
    """A file share. ``name`` is what jobs see under their mount root."""

    name: str

    # -- built on the primitives -------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        """True if ``path`` (a file or a directory) exists on the share."""
        return self.stat(path) is not None

    def read_text(self, path: str) -> str:
        """The UTF-8 text of the file ``path`` (undecodable bytes replaced)."""
        return self.read_bytes(path).decode("utf-8", errors="replace")

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` as UTF-8 to the file ``path``, replacing it."""
        self.write_bytes(path, text.encode("utf-8"))

    def read_json(self, path: str) -> Any:
        """The parsed JSON of the file ``path``; ``ShareError`` if it is not valid JSON."""
        try:
            return json.loads(self.read_bytes(path))
        except json.JSONDecodeError as exc:
            raise ShareError(f"{path} on share {self.name!r} is not valid JSON: {exc}", path) from exc

    def read_json_or_none(self, path: str) -> Any:
        """As ``read_json``, but None where the file does not exist."""
        try:
            return self.read_json(path)
        except NotFoundError:
            return None

    def write_json(self, path: str, data: Any) -> None:
        """Write ``data`` as indented JSON to the file ``path``, replacing it."""
        self.write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))

    def restrict(self, path: str) -> None:  # noqa: B027 - a no-op where the share has no POSIX modes
        """Make a file readable by its owner only (0600) where the share supports it (secret files)."""

    def write_private(self, path: str, data: bytes) -> None:
        """Write a file readable by its owner only, from its first byte where the share has POSIX modes."""
        self.write_bytes(path, data)
        self.restrict(path)

    def size(self, path: str) -> int:
        """The size in bytes of the file ``path``; ``NotFoundError`` for a missing file or a directory."""
        info = self.stat(path)
        if info is None or info.is_dir:
            raise NotFoundError("file", normalize(path), f"share {self.name!r}")
        return info.size or 0

    def upload(
        self,
        source: str | os.PathLike[str],
        path: str,
        *,
        progress: Progress | None = None,
        show_progress: bool | None = None,
    ) -> str:
        """Upload a local file or directory (recursively) to ``path``; returns the share path.

        A progress bar shows on a terminal or in a notebook (``show_progress`` forces it on or off).
        """
        src = Path(source).expanduser()
        dest = normalize(path)
        if not src.exists():
            raise NotFoundError("local file", str(src))
        files = [src] if src.is_file() else [Path(r) / f for r, _, fs in os.walk(src) for f in fs]
        total = sum(f.stat().st_size for f in files)
        with _progress.transfer(total, f"upload {src.name}", show_progress) as bar:
            callback = _progress.chain(progress, bar)
            if src.is_dir():
                self.mkdir(dest)
                for root, dirs, names in os.walk(src):
                    rel = Path(root).relative_to(src).as_posix()
                    base = join(dest, "" if rel == "." else rel)
                    for d in sorted(dirs):
                        self.mkdir(join(base, d))
                    for f in sorted(names):
                        self._upload_file(Path(root) / f, join(base, f), callback)
            else:
                parent = posixpath.dirname(dest)
                if parent:
                    self.mkdir(parent)
                self._upload_file(src, dest, callback)
        return dest

    def download(
        self,
        path: str,
        dest: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
        show_progress: bool | None = None,
    ) -> Path:
        """Download a file (or a directory, recursively) to ``dest``; an existing directory receives it.

        Written to a temporary name and renamed, so an interrupted download leaves no half file.
        """
        src = normalize(path)
        info = self.stat(src)
        if info is None:
            raise NotFoundError("file", src, f"share {self.name!r}")
        if self._escapes(src):
            raise ValidationError("path", src, "a path inside the share (this one leads out through a link)")
        total = sum(i.size or 0 for _, i in self.walk(src)) if info.is_dir else (info.size or 0)
        with _progress.transfer(total, f"download {posixpath.basename(src)}", show_progress) as bar:
            return self._download_tree(src, info, Path(dest).expanduser(), _progress.chain(progress, bar))

    def _download_tree(self, src: str, info: FileInfo, dest: Path, progress: Progress | None) -> Path:
        target = dest / posixpath.basename(src) if dest.is_dir() else dest
        if info.is_dir:
            target.mkdir(parents=True, exist_ok=True)
            links_out = self._links_out(src)
            for entry in self.list(src):
                if entry.name in links_out:
                    continue  # a symbolic link out of the share is not followed
                self._download_tree(join(src, entry.name), entry, target / entry.name, progress)
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as out:
                self._download_file(src, out, progress)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp made it 0600; a download gets the usual mode
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def walk(self, path: str = "") -> list[tuple[str, FileInfo]]:
        """Every file below ``path`` as (share path, info), depth first."""
        out: list[tuple[str, FileInfo]] = []
        links_out = self._links_out(path)
        for entry in self.list(path):
            if entry.name in links_out:
                continue
            full = join(path, entry.name)
            if entry.is_dir:
                out.extend(self.walk(full))
            else:
                out.append((full, entry))
        return out

    def real_path(self, path: str) -> str | None:
        """``path`` with its symbolic links resolved, as a share path; None when it leads out of the share
        (or, where the server cannot tell, nowhere). A share without links returns ``path`` as it is."""
        return normalize(path)

    def link_targets(self, path: str) -> dict[str, str | None]:
        """The entries of directory ``path`` that are symbolic links: name → ``real_path`` of the link."""
        return {}

    def _escapes(self, path: str) -> bool:
        """Whether ``path`` resolves outside the share (through a symbolic link a job planted)."""
        return self.real_path(path) is None

    def _links_out(self, path: str) -> set[str]:
        """Names of the entries of directory ``path`` that are symbolic links leading out of the share."""
        return {name for name, real in self.link_targets(path).items() if real is None}

    # -- primitives ----------------------------------------------------------------------------------
    @abstractmethod
    def stat(self, path: str) -> FileInfo | None:
        """Info of one file or directory, None when it does not exist."""

    @abstractmethod
    def list(self, path: str = "") -> list[FileInfo]:
        """Entries of a directory, sorted by name. Raises NotFoundError when it does not exist."""

    @abstractmethod
    def mkdir(self, path: str) -> None:
        """Create a directory and its parents; no error when it exists."""

    def mkdir_new(self, path: str) -> None:
        """Create the directory ``path`` (its parents as needed) or raise FileExistsError when it exists.

        The last step is one atomic create where the share allows it, so of two clients making the same
        folder at once exactly one succeeds: job names are reserved this way.
        """
        rel = normalize(path)
        parent = posixpath.dirname(rel)
        if parent:
            self.mkdir(parent)
        self._mkdir_one(rel)

    def _mkdir_one(self, path: str) -> None:
        if self.stat(path) is not None:
            raise FileExistsError(path)
        self.mkdir(path)

    @abstractmethod
    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        """``length`` bytes from ``offset`` (all to the end when None); fewer at the end; b"" past it."""

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a file, creating its parent directories."""

    @abstractmethod
    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file or (with recursive) a directory tree; no error when already gone."""

    @abstractmethod
    def _upload_file(self, source: Path, path: str, progress: Progress | None) -> None: ...

    @abstractmethod
    def _download_file(self, path: str, out: Any, progress: Progress | None) -> None: ...


class LocalShare(Share):
    """A directory on this machine (the local backend's share; also a mount the client sees)."""

    def __init__(self, root: str | os.PathLike[str], name: str = "share") -> None:
        self.root = Path(root).expanduser().resolve()
        self.name = name
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalShare({str(self.root)!r})"

    def local_path(self, path: str) -> Path:
        return self.root / normalize(path) if normalize(path) else self.root

    def stat(self, path: str) -> FileInfo | None:
        p = self.local_path(path)
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        is_dir = p.is_dir()
        return FileInfo(
            name=p.name if normalize(path) else "",
            type="directory" if is_dir else "file",
            size=None if is_dir else st.st_size,
            modified=datetime.fromtimestamp(st.st_mtime, timezone.utc),
        )

    def list(self, path: str = "") -> list[FileInfo]:
        p = self.local_path(path)
        if not p.is_dir():
            raise NotFoundError("directory", normalize(path) or "/", f"share {self.name!r}")
        out = []
        for child in sorted(p.iterdir(), key=lambda c: c.name):
            info = self.stat(join(normalize(path), child.name))
            if info is not None:
                out.append(info)
        return out

    def mkdir(self, path: str) -> None:
        self.local_path(path).mkdir(parents=True, exist_ok=True)

    def _mkdir_one(self, path: str) -> None:
        os.mkdir(self.local_path(path))

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        p = self.local_path(path)
        try:
            with p.open("rb") as f:
                f.seek(offset)
                return f.read() if length is None else f.read(length)
        except (FileNotFoundError, IsADirectoryError):
            raise NotFoundError("file", normalize(path), f"share {self.name!r}") from None

    def write_bytes(self, path: str, data: bytes) -> None:
        self._write(path, data, 0o644)

    def write_private(self, path: str, data: bytes) -> None:
        self._write(path, data, 0o600)

    def _write(self, path: str, data: bytes, mode: int) -> None:
        p = self.local_path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # with shutil: imported on first use, not with batchai_sdk (about 3 ms)

        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")  # created 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if mode != 0o600:
                os.chmod(tmp, mode)
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # a full or read-only disk leaves no half-written file behind
            raise

    def restrict(self, path: str) -> None:
        os.chmod(self.local_path(path), 0o600)

    def _inside(self, real: Path) -> bool:
        return real == self.root or real.is_relative_to(self.root)

    def _share_path(self, real: Path) -> str | None:
        return normalize(real.relative_to(self.root).as_posix()) if self._inside(real) else None

    def real_path(self, path: str) -> str | None:
        return self._share_path(self.local_path(path).resolve())

    def link_targets(self, path: str) -> dict[str, str | None]:
        return {
            c.name: self._share_path(c.resolve()) for c in self.local_path(path).iterdir() if c.is_symlink()
        }

    def delete(self, path: str, *, recursive: bool = False) -> None:
        p = self.local_path(path)
        if normalize(path) and not self._inside(p.parent.resolve()):
            return  # reached through a symbolic link out of the share: nothing of the share is there
        if p.is_dir() and not p.is_symlink():
            if recursive:
                import shutil

                shutil.rmtree(p, ignore_errors=True)
            else:
                p.rmdir()
        else:
            p.unlink(missing_ok=True)

    def _upload_file(self, source: Path, path: str, progress: Progress | None) -> None:
        dest = self.local_path(path)
        tmp = dest.with_name(f".{dest.name}.part")
        try:
            with source.open("rb") as src, tmp.open("wb") as out:
                copy_stream(src, out, progress)
            import shutil

            shutil.copymode(source, tmp)
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _download_file(self, path: str, out: Any, progress: Progress | None) -> None:
        with self.local_path(path).open("rb") as src:
            copy_stream(src, out, progress)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def copy_stream(src: Any, out: Any, progress: Progress | None, chunk: int = 1 << 20) -> None:
    """Copy file-like ``src`` to ``out`` in chunks, reporting each chunk's size to ``progress``."""
    while True:
        buf = src.read(chunk)
        if not buf:
            return
        out.write(buf)
        if progress is not None:
            progress(len(buf))
