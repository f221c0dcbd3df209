"""A fake of the Azure Files REST API, served through ``responses`` to the real ``ShareClient``.

It implements what batchai_sdk uses — create/delete share, create/get/list/delete directory (XML
``EnumerationResults`` with ``NextMarker`` paging), create file (``x-ms-content-length``), put range
(``x-ms-range``, ``x-ms-write: update``, at most 4 MiB), get properties (HEAD), ranged GET (206 with
``Content-Range``, 416 past the end) and delete file — over a real directory, so that processes (the
loopback "nodes") see the same files. Signatures are not verified, but every request must carry an
``Authorization`` header; requests without one are answered 403 and recorded.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import responses

MAX_RANGE = 4 * 1024 * 1024
Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Counters:
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, query)
    ranged_get_bytes: int = 0  # body bytes served by GETs that named a range
    get_bytes: int = 0  # body bytes served by every GET of file content
    put_range_bytes: int = 0
    ranges_put: int = 0
    throttled: int = 0
    unauthorized: list[str] = field(default_factory=list)


class FakeFilesService:
    """Serves ``https://<account>.file.core.windows.net/<share>/...`` from ``root/<share>/...``."""

    def __init__(self, root: Path, account: str = "batchaitest", *, page_size: int = 5000) -> None:
        self.root = Path(root)
        self.account = account
        self.host = f"{account}.file.core.windows.net"
        self.page_size = page_size
        self.counters = Counters()
        self._lock = threading.RLock()
        self._throttle = 0
        self._throttle_status = 503

    @property
    def endpoint(self) -> str:
        return f"https://{self.host}"

    def register(self, mock: responses.RequestsMock) -> None:
        pattern = re.compile(rf"https://{re.escape(self.host)}(/.*)?")
        for method in ("GET", "PUT", "HEAD", "DELETE"):
            mock.add_callback(method, pattern, callback=self._handle)

    refuse_writes = False  # True: every PUT (a file's creation or range) fails with 500, reads still work

    def throttle_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` requests with ``status`` (503 ServerBusy: Azure Files throttling)."""
        with self._lock:
            self._throttle = count
            self._throttle_status = status

    def share_dir(self, share: str) -> Path:
        return self.root / share

    # -- plumbing ------------------------------------------------------------------------------------
    def _handle(self, request: Any) -> Reply:
        url = urlsplit(request.url)
        query = {k.lower(): v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in request.headers.items()}
        parts = [unquote(p) for p in url.path.split("/") if p]
        with self._lock:
            self.counters.requests.append((request.method, url.path, url.query))
            if "authorization" not in headers:
                self.counters.unauthorized.append(f"{request.method} {url.path}")
                return self._error(request.method, 403, "AuthenticationFailed", "No Authorization header.")
            if self.refuse_writes and request.method == "PUT":
                return self._error(request.method, 500, "InternalError", "The server encountered an error.")
            if self._throttle > 0:
                self._throttle -= 1
                self.counters.throttled += 1
                return self._error(request.method, self._throttle_status, "ServerBusy", "The server is busy.")
        if not parts:
            return self._error(request.method, 400, "InvalidUri", "Account-level operations are not faked.")
        share, rel = parts[0], "/".join(parts[1:])
        if any(p in ("..", ".") for p in parts[1:]):
            return self._error(request.method, 400, "InvalidResourceName", "Invalid path.")
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = b"".join(body) if hasattr(body, "__iter__") else body.read()
        restype = query.get("restype")
        comp = query.get("comp")
        method = request.method
        if restype == "share":
            return self._share(method, share)
        if not self.share_dir(share).is_dir():
            return self._error(method, 404, "ShareNotFound", "The specified share does not exist.")
        target = self.share_dir(share) / rel if rel else self.share_dir(share)
        if restype == "directory":
            if comp == "list":
                return self._list(share, rel, target, query)
            return self._directory(method, target)
        if method == "PUT" and comp == "range":
            return self._put_range(target, headers, body)
        if method == "PUT" and comp is None:
            return self._create_file(target, headers, body)
        if method in ("GET", "HEAD") and comp is None:
            return self._get_file(method, target, headers)
        if method == "DELETE":
            return self._delete_file(target)
        if method == "PUT" and comp in ("properties", "metadata"):
            return (200, self._file_headers(target), b"") if target.is_file() else self._not_found(method)
        return self._error(method, 400, "UnsupportedOperation", f"{method} comp={comp} is not faked.")

    def _common(self) -> dict[str, str]:
        return {
            "x-ms-request-id": str(uuid.uuid4()),
            "x-ms-version": "2025-05-05",
            "Date": format_datetime(datetime.now(timezone.utc), usegmt=True),
        }

    def _error(
        self, method: str, status: int, code: str, message: str, extra: dict[str, str] | None = None
    ) -> Reply:
        headers = {**self._common(), "x-ms-error-code": code, **(extra or {})}
        if method == "HEAD":
            return status, headers, b""
        headers["Content-Type"] = "application/xml"
        body = (
            '<?xml version="1.0" encoding="utf-8"?><Error><Code>'
            + code
            + "</Code><Message>"
            + escape(message)
            + "\nRequestId:"
            + headers["x-ms-request-id"]
            + "</Message></Error>"
        )
        return status, headers, body.encode()

    def _not_found(self, method: str, code: str = "ResourceNotFound") -> Reply:
        return self._error(method, 404, code, "The specified resource does not exist.")

    def _props(self, path: Path) -> dict[str, str]:
        st = path.stat()
        modified = datetime.fromtimestamp(st.st_mtime, timezone.utc)
        iso = modified.strftime("%Y-%m-%dT%H:%M:%S.%f0Z")
        etag = '"0x' + hashlib.sha1(f"{st.st_mtime_ns}-{st.st_size}".encode()).hexdigest()[:15].upper() + '"'
        return {
            "ETag": etag,
            "Last-Modified": format_datetime(modified, usegmt=True),
            "x-ms-file-attributes": "Directory" if path.is_dir() else "Archive",
            "x-ms-file-creation-time": iso,
            "x-ms-file-last-write-time": iso,
            "x-ms-file-change-time": iso,
            "x-ms-file-permission-key": "4066528134148476695*1",
            "x-ms-file-id": str(st.st_ino),
            "x-ms-file-parent-id": str(path.parent.stat().st_ino),
            "x-ms-request-server-encrypted": "true",
        }

    def _file_headers(self, path: Path) -> dict[str, str]:
        return {**self._common(), **self._props(path)}

    # -- operations ------------------------------------------------------------------------------------
    def _share(self, method: str, share: str) -> Reply:
        d = self.share_dir(share)
        if method == "PUT":
            if d.is_dir():
                return self._error(method, 409, "ShareAlreadyExists", "The specified share already exists.")
            d.mkdir(parents=True)
            return 201, self._file_headers(d), b""
        if method in ("GET", "HEAD"):
            return (
                (200, self._file_headers(d), b"") if d.is_dir() else self._not_found(method, "ShareNotFound")
            )
        if method == "DELETE":
            if not d.is_dir():
                return self._not_found(method, "ShareNotFound")
            shutil.rmtree(d)
            return 202, self._common(), b""
        return self._error(method, 400, "UnsupportedOperation", "")

    def _directory(self, method: str, target: Path) -> Reply:
        if method == "PUT":
            if target.exists():
                return self._error(
                    method, 409, "ResourceAlreadyExists", "The specified resource already exists."
                )
            if not target.parent.is_dir():
                return self._error(method, 404, "ParentNotFound", "The specified parent path does not exist.")
            target.mkdir()
            return 201, self._file_headers(target), b""
        if method in ("GET", "HEAD"):
            return (200, self._file_headers(target), b"") if target.is_dir() else self._not_found(method)
        if method == "DELETE":
            if not target.is_dir():
                return self._not_found(method)
            if any(target.iterdir()):
                return self._error(method, 409, "DirectoryNotEmpty", "The specified directory is not empty.")
            target.rmdir()
            return 202, self._common(), b""
        return self._error(method, 400, "UnsupportedOperation", "")

    def _list(self, share: str, rel: str, target: Path, query: dict[str, str]) -> Reply:
        if not target.is_dir():
            return self._not_found("GET")
        names = sorted(p.name for p in target.iterdir() if not p.name.startswith(".fake-"))
        prefix = query.get("prefix")
        if prefix:
            names = [n for n in names if n.startswith(prefix)]
        marker = query.get("marker") or ""
        if marker:
            names = [n for n in names if n >= marker]
        limit = min(int(query.get("maxresults") or self.page_size), self.page_size)
        page, rest = names[:limit], names[limit:]
        timestamps = "timestamps" in (query.get("include") or "").lower()
        entries = []
        for name in page:
            p = target / name
            props = self._props(p)
            extra = ""
            if timestamps:
                extra = (
                    f"<CreationTime>{props['x-ms-file-creation-time']}</CreationTime>"
                    f"<LastAccessTime>{props['x-ms-file-last-write-time']}</LastAccessTime>"
                    f"<LastWriteTime>{props['x-ms-file-last-write-time']}</LastWriteTime>"
                    f"<ChangeTime>{props['x-ms-file-change-time']}</ChangeTime>"
                    f"<Last-Modified>{props['Last-Modified']}</Last-Modified>"
                    f"<Etag>{escape(props['ETag'])}</Etag>"
                )
            if p.is_dir():
                entries.append(
                    f"<Directory><Name>{escape(name)}</Name><FileId>{props['x-ms-file-id']}</FileId>"
                    f"<Properties>{extra}</Properties></Directory>"
                )
            else:
                entries.append(
                    f"<File><Name>{escape(name)}</Name><FileId>{props['x-ms-file-id']}</FileId><Properties>"
                    f"<Content-Length>{p.stat().st_size}</Content-Length>{extra}</Properties></File>"
                )
        body = (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<EnumerationResults ServiceEndpoint="{self.endpoint}/" ShareName="{escape(share)}" '
            f'DirectoryPath="{escape(rel)}">'
            + (f"<Marker>{escape(marker)}</Marker>" if marker else "")
            + f"<MaxResults>{limit}</MaxResults><Entries>{''.join(entries)}</Entries>"
            + f"<NextMarker>{escape(rest[0]) if rest else ''}</NextMarker></EnumerationResults>"
        )
        return 200, {**self._common(), "Content-Type": "application/xml"}, body.encode()

    def _create_file(self, target: Path, headers: dict[str, str], body: bytes) -> Reply:
        if headers.get("x-ms-type", "").lower() != "file":
            return self._error("PUT", 400, "MissingRequiredHeader", "x-ms-type: file is required.")
        if not target.parent.is_dir():
            return self._error("PUT", 404, "ParentNotFound", "The specified parent path does not exist.")
        if target.is_dir():
            return self._error(
                "PUT", 409, "ResourceTypeMismatch", "The specified resource type does not match."
            )
        size = int(headers.get("x-ms-content-length", "0"))
        with self._lock, open(target, "wb") as f:
            if body:
                f.write(body)
            f.truncate(size)
        return 201, self._file_headers(target), b""

    def _put_range(self, target: Path, headers: dict[str, str], body: bytes) -> Reply:
        if not target.is_file():
            return self._not_found("PUT")
        m = re.match(r"bytes=(\d+)-(\d+)$", headers.get("x-ms-range") or headers.get("range") or "")
        if not m:
            return self._error("PUT", 400, "InvalidHeaderValue", "x-ms-range is required.")
        start, end = int(m.group(1)), int(m.group(2))
        size = target.stat().st_size
        if end < start or end >= size:
            return self._error(
                "PUT", 416, "InvalidRange", "The range specified is invalid for the current size."
            )
        if end - start + 1 > MAX_RANGE:
            return self._error("PUT", 413, "RequestBodyTooLarge", "A range may hold at most 4 MiB.")
        write = headers.get("x-ms-write", "update").lower()
        data = body if write == "update" else b"\0" * (end - start + 1)
        if len(data) != end - start + 1:
            return self._error("PUT", 400, "InvalidHeaderValue", "Body length does not match x-ms-range.")
        with self._lock, open(target, "r+b") as f:
            f.seek(start)
            f.write(data)
            self.counters.put_range_bytes += len(data)
            self.counters.ranges_put += 1
        out = self._file_headers(target)
        out["Content-MD5"] = ""
        return 201, out, b""

    def _get_file(self, method: str, target: Path, headers: dict[str, str]) -> Reply:
        if not target.is_file():
            return self._not_found(method)
        size = target.stat().st_size
        base = {
            **self._file_headers(target),
            "x-ms-type": "File",
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
        }
        if method == "HEAD":
            return 200, {**base, "Content-Length": str(size)}, b""
        spec = headers.get("x-ms-range") or headers.get("range")
        if not spec:
            data = target.read_bytes()
            with self._lock:
                self.counters.get_bytes += len(data)
            return 200, {**base, "Content-Length": str(len(data))}, data
        m = re.match(r"bytes=(\d+)-(\d*)$", spec)
        if not m:
            return self._error(method, 400, "InvalidHeaderValue", "Bad range.")
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) else size - 1
        if start >= size:
            return self._error(
                method,
                416,
                "InvalidRange",
                "The range specified is invalid for the current size.",
                {"Content-Range": f"bytes */{size}"},
            )
        end = min(end, size - 1)
        with open(target, "rb") as f:
            f.seek(start)
            data = f.read(end - start + 1)
        with self._lock:
            self.counters.ranged_get_bytes += len(data)
            self.counters.get_bytes += len(data)
        return (
            206,
            {**base, "Content-Length": str(len(data)), "Content-Range": f"bytes {start}-{end}/{size}"},
            data,
        )

    def _delete_file(self, target: Path) -> Reply:
        if not target.is_file():
            return self._not_found("DELETE")
        target.unlink()
        return 202, self._common(), b""
