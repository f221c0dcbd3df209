"""Queued jobs held back because a storage they mount is not there (``mount_unavailable``).

Before it starts a job, the scheduler looks, on the head node it runs on, at each of the job's mounts
(``launch.json``'s ``mount_links``: where the nodes see each storage, the cluster's mount of it or the
backend's storage root): a folder that is missing, a dangling link, or one that cannot be read is a storage
that cannot be used. Such a job does not start (it would only fail on it); it waits, named in
``job.status.pending``, and is looked at again every pass: once its storage is there, it starts. One
``stat`` per mount, on a worker thread with a deadline: a network storage that hangs (a stuck FUSE or NFS
server) makes the job wait as "not answering" instead of stopping the scheduler's loop; the other nodes'
mounts are checked where the job runs (node setup, the launcher).
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Iterable

from ..protocol.launch import LaunchConfig, MountLink

PROBE_SECONDS = 2.0  # one look at a storage; longer is a storage that does not answer


class _Look(threading.Thread):
    """One look at a storage, on a daemon thread: one stuck in the kernel never holds the scheduler's exit
    (a ThreadPoolExecutor's workers are joined at exit)."""

    def __init__(self, target: str) -> None:
        super().__init__(name="mount-look", daemon=True)
        self.target = target
        self.why: str | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        self.why = _why(self.target)
        self.done.set()


_inflight: dict[str, _Look] = {}
_lock = threading.Lock()


def _why(target: str) -> str | None:
    try:
        if not os.path.isdir(target):
            return f"{target} is missing or not mounted"
        if not os.access(target, os.R_OK | os.X_OK):
            return f"{target} cannot be read"
    except OSError as exc:  # isdir and access swallow most; a name too long, say, is not
        return f"{target}: {exc.strerror or exc}"
    return None


def _look(target: str) -> str | None:
    """Why ``target`` cannot be used, within ``PROBE_SECONDS``; a look still hanging from an earlier pass
    answers at once (one stuck thread per storage, not one per pass)."""
    with _lock:
        look = _inflight.get(target)
        fresh = look is None
        if look is None:
            look = _inflight[target] = _Look(target)
    if not look.done.wait(PROBE_SECONDS if fresh else 0):
        return f"{target} does not answer (a look at it has taken over {PROBE_SECONDS:g} s)"
    with _lock:
        _inflight.pop(target, None)
    return look.why


def missing(links: Iterable[MountLink]) -> dict[str, str]:
    """Mount name (its ``relative_mount_path``) → why it cannot be used here, for each that cannot."""
    out: dict[str, str] = {}
    for link in links:
        why = _look(link["target"])
        if why is not None:
            out[posixpath.basename(link["path"].rstrip("/"))] = why
    return out


class MountWaits:
    """Job id → the mounts that keep it waiting (mount → why), with the links to look at again."""

    def __init__(self) -> None:
        self.node = ""  # where the checks ran (the head node's id), named in the reason
        self.waiting: dict[int, tuple[list[MountLink], dict[str, str]]] = {}

    def ready(self, job_id: int, launch: LaunchConfig | None, node: str) -> bool:
        """Whether the job's mounts can be used on this node; if not, it waits (``held``)."""
        links = list(launch.get("mount_links") or []) if launch is not None else []
        found = missing(links)
        if not found:
            self.waiting.pop(job_id, None)
            return True
        self.node = node
        self.waiting[job_id] = (links, found)
        return False

    def recheck(self, queued: Iterable[int] | None = None) -> None:
        """Look again at each waiting job's mounts: the ones now there start at this pass. ``queued``: the
        jobs still queued, where known (a job ended while it waited is forgotten)."""
        if queued is not None:
            keep = set(queued)
            for job_id in [j for j in self.waiting if j not in keep]:
                del self.waiting[job_id]
        for job_id, (links, _) in list(self.waiting.items()):
            found = missing(links)
            if found:
                self.waiting[job_id] = (links, found)
            else:
                del self.waiting[job_id]

    def held(self) -> set[int]:
        return set(self.waiting)

    def reasons(self) -> dict[int, dict[str, str]]:
        return {job_id: dict(found) for job_id, (_, found) in self.waiting.items()}

    def observed(self) -> tuple[object, ...]:
        """What the published reasons are made of (an unchanged one is not written again)."""
        return tuple(sorted((j, tuple(sorted(f.items()))) for j, (_, f) in self.waiting.items()))
