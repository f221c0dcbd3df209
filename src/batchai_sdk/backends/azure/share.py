"""The workspace share as an Azure file share, through azure-storage-file-share's ``ShareClient``.

Reads are ranged GETs, so a stream that knows the size it has read fetches only the new bytes; uploads
and downloads go in 4 MiB ranges with ``max_concurrency`` in flight; throttling (503 ServerBusy,
500 OperationTimedOut) is retried by the storage client's exponential retry policy.
"""

from __future__ import annotations

import posixpath
from datetime import datetime
from pathlib import Path
from typing import Any

from ..._models import FileInfo
from ...exceptions import NotFoundError, ShareError
from ...share import Progress, Share, join, normalize
from . import _sdk
from .errors import is_not_found, scrub


def _status(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


def _code(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    if code:
        return str(getattr(code, "value", code))  # azure-storage gives a StorageErrorCode enum
    response = getattr(exc, "response", None)
    return str(response.headers.get("x-ms-error-code", "")) if response is not None else ""


class _ProgressAdapter:
    """azure-storage reports (bytes so far, total); :data:`Progress` wants the bytes just moved."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._seen = 0

    def __call__(self, current: int, total: int | None) -> None:
        if self._progress is not None and current > self._seen:
            self._progress(current - self._seen)
            self._seen = current


class AzureFileShare(Share):
    """An Azure file share. ``share_client`` is an ``azure.storage.fileshare.ShareClient``."""

    def __init__(
        self,
        share_client: Any,
        *,
        max_concurrency: int = 4,
        timeout: int | None = 60,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.client = share_client
        self.name = str(share_client.share_name)
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self._secrets = secrets

    @classmethod
    def from_account_key(
        cls,
        account_name: str,
        account_key: str,
        share_name: str,
        *,
        endpoint: str | None = None,
        max_concurrency: int = 4,
        retry_total: int = 5,
        retry_initial_backoff: float = 2.0,
        retry_increment_base: float = 4.0,
        retry_jitter: float = 1.0,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        **client_kwargs: Any,
    ) -> AzureFileShare:
        """A share authorized with the storage account's shared key (sent only in request signatures)."""
        fs = _sdk.fileshare()
        retry = fs.ExponentialRetry(
            initial_backoff=retry_initial_backoff,
            increment_base=retry_increment_base,
            retry_total=retry_total,
            random_jitter_range=retry_jitter,
        )
        client = fs.ShareClient(
            endpoint or f"https://{account_name}.file.core.windows.net",
            share_name,
            credential={"account_name": account_name, "account_key": account_key},
            retry_policy=retry,
            connection_timeout=connect_timeout,
            read_timeout=read_timeout,
            **client_kwargs,
        )
        return cls(client, max_concurrency=max_concurrency, secrets=(account_key,))

    def __repr__(self) -> str:
        return f"AzureFileShare({self.client.url.split('?')[0]!r})"

    # -- errors ------------------------------------------------------------------------------------
    def _error(self, exc: BaseException, operation: str, path: str) -> ShareError:
        ex = _sdk.core_exceptions()
        if isinstance(exc, ex.ServiceRequestError):
            text = f"{operation} {path or '/'} on share {self.name!r}: Azure Files is unreachable"
        else:
            code = _code(exc)
            message = (getattr(exc, "message", None) or str(exc)).split("\n")[0]
            what = f"{code}: {message}" if code else message
            text = f"{operation} {path or '/'} on share {self.name!r} failed: {what}"
        return ShareError(scrub(text, self._secrets), path)

    def _call(self, operation: str, path: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        ex = _sdk.core_exceptions()
        try:
            return fn(*args, **kwargs)
        except ex.AzureError as exc:
            if is_not_found(exc):
                raise NotFoundError("file", path or "/", f"share {self.name!r}") from exc
            raise self._error(exc, operation, path) from exc

    # -- the share itself ---------------------------------------------------------------------------
    def create(self) -> None:
        """Create the share; no error when it exists."""
        ex = _sdk.core_exceptions()
        try:
            self.client.create_share(timeout=self.timeout)
        except ex.ResourceExistsError:
            return
        except ex.AzureError as exc:
            raise self._error(exc, "create share", "") from exc

    # -- primitives ----------------------------------------------------------------------------------
    def stat(self, path: str) -> FileInfo | None:
        p = normalize(path)
        if not p:
            return FileInfo(name="", type="directory", size=None, modified=None)
        ex = _sdk.core_exceptions()
        try:
            props = self.client.get_file_client(p).get_file_properties(timeout=self.timeout)
            return FileInfo(
                name=posixpath.basename(p),
                type="file",
                size=int(props.size),
                modified=_aware(props.last_modified),
            )
        except ex.AzureError as exc:
            if not is_not_found(exc):
                raise self._error(exc, "stat", p) from exc
        try:
            props = self.client.get_directory_client(p).get_directory_properties(timeout=self.timeout)
        except ex.AzureError as exc:
            if is_not_found(exc):
                return None
            raise self._error(exc, "stat", p) from exc
        return FileInfo(
            name=posixpath.basename(p), type="directory", size=None, modified=_aware(props.last_modified)
        )

    def list(self, path: str = "") -> list[FileInfo]:
        p = normalize(path)
        directory = self.client.get_directory_client(p)

        def entries() -> list[FileInfo]:
            out = []
            for item in directory.list_directories_and_files(include=["timestamps"], timeout=self.timeout):
                is_dir = bool(item.get("is_directory"))
                modified = item.get("last_modified") or item.get("last_write_time")
                out.append(
                    FileInfo(
                        name=str(item["name"]),
                        type="directory" if is_dir else "file",
                        size=None if is_dir else int(item.get("size") or 0),
                        modified=_aware(modified),
                    )
                )
            return out

        try:
            found: list[FileInfo] = self._call("list", p, entries)
        except NotFoundError:
            raise NotFoundError("directory", p or "/", f"share {self.name!r}") from None
        return sorted(found, key=lambda e: e.name)

    def _mkdir_one(self, path: str) -> None:
        ex = _sdk.core_exceptions()
        try:
            self.client.get_directory_client(normalize(path)).create_directory(timeout=self.timeout)
        except ex.ResourceExistsError:
            raise FileExistsError(path) from None
        except ex.AzureError as exc:
            raise self._error(exc, "mkdir", normalize(path)) from exc

    def mkdir(self, path: str) -> None:
        p = normalize(path)
        if not p:
            return
        ex = _sdk.core_exceptions()
        try:
            self.client.get_directory_client(p).create_directory(timeout=self.timeout)
        except ex.ResourceExistsError:
            return
        except ex.AzureError as exc:
            if _code(exc) != "ParentNotFound" and not is_not_found(exc):
                raise self._error(exc, "mkdir", p) from exc
            self.mkdir(posixpath.dirname(p))
            try:
                self.client.get_directory_client(p).create_directory(timeout=self.timeout)
            except ex.ResourceExistsError:
                return
            except ex.AzureError as again:
                raise self._error(again, "mkdir", p) from again

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        p = normalize(path)
        if length is not None and length <= 0:
            return b""
        ex = _sdk.core_exceptions()
        file = self.client.get_file_client(p)
        try:
            downloader = file.download_file(
                offset=offset if offset or length is not None else None,
                length=length,
                max_concurrency=self.max_concurrency,
                timeout=self.timeout,
            )
            return bytes(downloader.readall())
        except ex.AzureError as exc:
            if _status(exc) == 416:  # the range starts at or past the end: nothing new
                return b""
            if is_not_found(exc):
                raise NotFoundError("file", p, f"share {self.name!r}") from exc
            raise self._error(exc, "read", p) from exc

    def write_bytes(self, path: str, data: bytes) -> None:
        p = normalize(path)
        self._upload(p, lambda: (data, len(data)), None)

    def delete(self, path: str, *, recursive: bool = False) -> None:
        p = normalize(path)
        info = self.stat(p)
        if info is None:
            return
        ex = _sdk.core_exceptions()
        try:
            if not info.is_dir:
                self.client.get_file_client(p).delete_file(timeout=self.timeout)
                return
            if recursive:
                for entry in self.list(p):
                    self.delete(join(p, entry.name), recursive=True)
            if p:
                self.client.get_directory_client(p).delete_directory(timeout=self.timeout)
        except ex.AzureError as exc:
            if is_not_found(exc):
                return
            raise self._error(exc, "delete", p) from exc

    def _upload(self, path: str, opener: Any, progress: Progress | None) -> None:
        ex = _sdk.core_exceptions()
        file = self.client.get_file_client(path)
        for attempt in (1, 2):
            data, size = opener()
            try:
                file.upload_file(
                    data,
                    length=size,
                    max_concurrency=self.max_concurrency,
                    progress_hook=_ProgressAdapter(progress),
                    timeout=self.timeout,
                )
                return
            except ex.AzureError as exc:
                parent = posixpath.dirname(path)
                if attempt == 1 and parent and (_code(exc) == "ParentNotFound" or is_not_found(exc)):
                    self.mkdir(parent)
                    continue
                raise self._error(exc, "upload", path) from exc
            finally:
                if hasattr(data, "close"):
                    data.close()

    def _upload_file(self, source: Path, path: str, progress: Progress | None) -> None:
        self._upload(normalize(path), lambda: (source.open("rb"), source.stat().st_size), progress)

    def _download_file(self, path: str, out: Any, progress: Progress | None) -> None:
        p = normalize(path)
        ex = _sdk.core_exceptions()
        try:
            downloader = self.client.get_file_client(p).download_file(
                max_concurrency=self.max_concurrency,
                progress_hook=_ProgressAdapter(progress),
                timeout=self.timeout,
            )
            downloader.readinto(out)
        except ex.AzureError as exc:
            if is_not_found(exc):
                raise NotFoundError("file", p, f"share {self.name!r}") from exc
            raise self._error(exc, "download", p) from exc

    def close(self) -> None:
        self.client.close()


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    from datetime import timezone

    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
