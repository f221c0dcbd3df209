"""A job's files as its handle reads them: only what lies inside the job's own folders.

A job writes to the share, so it can plant symbolic links there (``passwd.txt -> /etc/passwd``, a folder
swapped for a link to ``/etc`` or to another job's outputs). ``Job.tail``, ``stream``, ``files`` and
``download`` resolve the path they are about to read and refuse it unless it resolves inside one of the
job's folders as written (its logs, its output directories, the folder of its ``--dir`` argument): a link
anywhere on the way that leads elsewhere — out of the share, or to another folder on it — is refused, and
a listing leaves such links out. Reading them (following a growing log, its last lines) is here too.
"""

from __future__ import annotations

import shlex
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from ._layout import share_relative
from ._models import FileInfo, JobSpec
from .exceptions import BatchAITimeoutError, ValidationError
from .share import Share, join, normalize


def _within(path: str, roots: list[str]) -> bool:
    return any(root == "" or path == root or path.startswith(root + "/") for root in roots)


def confined(share: Share, path: str, roots: Iterable[str], name: str) -> str:
    """``path`` when it resolves inside one of the job's folders ``roots`` (or is not there at all);
    otherwise a ValidationError naming ``name``, what the caller asked for."""
    real = share.real_path(path)
    if real is None and not share.exists(path):
        return path  # nothing there (yet): reading it finds nothing either
    if real is None or not _within(real, [normalize(r) for r in roots]):
        raise ValidationError(
            "name", name, "a file inside the job's folders (this one leads out through a link)"
        )
    return path


def list_confined(share: Share, path: str, roots: Iterable[str], name: str) -> list[FileInfo]:
    """The entries of the job's folder ``path``, without the links that lead out of the job's folders."""
    inside = [normalize(r) for r in roots]
    confined(share, path, inside, name)
    links = share.link_targets(path) if share.exists(path) else {}

    def keep(entry: FileInfo) -> bool:
        if entry.name not in links:
            return True
        target = links[entry.name]
        return target is not None and _within(target, inside)

    return [entry for entry in share.list(path) if keep(entry)]


def dir_argument(spec: JobSpec, stdouterr: str, share_name: str) -> str | None:
    """The share path of the folder a job's ``--dir`` argument names (the training module's output
    folder, as in the tutorial), or None when it has none on the share."""
    words = list(spec.args)
    if len(words) == 1 and " " in words[0]:
        words = shlex.split(words[0])
    value = None
    for i, word in enumerate(words):
        if word in ("--dir", "-d") and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--dir="):
            value = word.split("=", 1)[1]
    if value is None:
        return None
    for var in ("$AZ_BATCHAI_STDOUTERR_DIR", "${AZ_BATCHAI_STDOUTERR_DIR}"):
        if value == var or value.startswith(var + "/"):
            return join(stdouterr, value[len(var) + 1 :])
    return share_relative(value, mount_path=spec.mount_path, share_name=share_name, job_mounts=spec.mounts)


def last_lines(share: Share, path: str, lines: int) -> list[str]:
    """The last ``lines`` lines of a file, reading only its end (a window that grows until it holds them)."""
    size = share.size(path)
    window = 8192
    while True:
        start = max(0, size - window)
        data = share.read_bytes(path, start, size - start)
        text = data.decode("utf-8", errors="replace").splitlines()
        if start == 0 or len(text) > lines:
            return list(deque(text if start == 0 else text[1:], maxlen=lines))
        window *= 4


def follow_lines(
    share: Share,
    path: str,
    *,
    ended: Callable[[], bool],
    check: Callable[[], object] | None,
    missing: Exception | None,
    poll_interval: float,
    timeout: float | None,
    what: str,
) -> Iterator[str]:
    """The lines of a file as they are written (``Job.stream``): each poll reads only the bytes added
    since the last; ends once ``ended()`` and the file is drained. ``check`` runs before each read (a
    link may come later); a file still missing at the end raises ``missing`` when given."""
    offset = 0
    pending = b""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = ended()
        info = share.stat(path)
        if info is None:
            if done:
                if missing is not None:
                    raise missing
                return
        elif (info.size or 0) < offset:  # a requeued attempt started the file anew
            offset, pending = 0, b""
            continue
        elif (info.size or 0) > offset:
            if check is not None:
                check()
            chunk = share.read_bytes(path, offset, (info.size or 0) - offset)
            offset += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", errors="replace").rstrip("\r")
            continue  # the file may still be growing: read again before sleeping
        if done:
            if pending:
                yield pending.decode("utf-8", errors="replace").rstrip("\r")
            return
        if deadline is not None and time.monotonic() > deadline:
            raise BatchAITimeoutError(what, timeout or 0)
        time.sleep(poll_interval)
