"""A job's Batch task files as a read-only share: what ``job.files/stream/tail/download`` read with
``directory="batch"`` on the Azure Batch engine.

The job's own logs are on the workspace share (the launcher writes them there, and they outlive the
nodes); these are the files Batch keeps in the task's folder on its primary node — the application and
coordination commands' ``stdout.txt``/``stderr.txt`` and the working folder — until the node leaves.
Reads are ranged (``Range``, answered ``206``), so following a growing file fetches only what was added.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from ..._models import FileInfo, parse_time
from ...exceptions import NotSupportedError
from ...share import Progress, Share
from .client import BatchService

CHUNK = 4 * 1024 * 1024


def _normal(name: str) -> str:
    return name.replace("\\", "/").strip("/")


class BatchTaskFiles(Share):
    """The files of task ``task_id`` of Batch job ``job_id`` (read-only)."""

    def __init__(self, service: BatchService, job_id: str, task_id: str) -> None:
        self.service = service
        self.job_id = job_id
        self.task_id = task_id
        self.name = f"batch task {job_id}/{task_id}"

    def __repr__(self) -> str:
        return f"BatchTaskFiles({self.job_id!r}, {self.task_id!r})"

    def _entries(self) -> list[tuple[str, FileInfo]]:
        out = []
        for raw in self.service.list_task_files(self.job_id, self.task_id):
            path = _normal(str(raw.get("name") or ""))
            props = raw.get("properties") or {}
            size = props.get("contentLength")
            out.append(
                (
                    path,
                    FileInfo(
                        name=posixpath.basename(path),
                        type="directory" if raw.get("isDirectory") else "file",
                        size=None if raw.get("isDirectory") or size is None else int(size),
                        modified=parse_time(props.get("lastModified")),
                    ),
                )
            )
        return out

    def stat(self, path: str) -> FileInfo | None:
        path = _normal(path)
        if not path:
            return FileInfo(name="", type="directory", size=None, modified=None)
        size = self.service.task_file_size(self.job_id, self.task_id, path)
        if size is None:
            return None
        return FileInfo(name=posixpath.basename(path), type="file", size=size, modified=None)

    def list(self, path: str = "") -> list[FileInfo]:
        folder = _normal(path)
        return [
            info for name, info in self._entries() if posixpath.dirname(name) == folder and name != folder
        ]

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        if length is None:
            length = max(0, (self.size(path) or 0) - offset)
        return self.service.read_task_file(self.job_id, self.task_id, _normal(path), offset, length)

    def _download_file(self, path: str, out: Any, progress: Progress | None) -> None:
        offset = 0
        while True:
            chunk = self.read_bytes(path, offset, CHUNK)
            if not chunk:
                return
            out.write(chunk)
            offset += len(chunk)
            if progress is not None:
                progress(len(chunk))

    # -- read-only -----------------------------------------------------------------------------------
    def _refuse(self, *_: object, **__: object) -> Any:
        raise NotSupportedError("writing", "Batch task files", "they are the task's; write to the share")

    def mkdir(self, path: str) -> None:
        self._refuse()

    def write_bytes(self, path: str, data: bytes) -> None:
        self._refuse()

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self._refuse()

    def _upload_file(self, source: Path, path: str, progress: Progress | None) -> None:
        self._refuse()
