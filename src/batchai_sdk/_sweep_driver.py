"""The one driver of a sweep: a lease on the share, beside the sweep's record, that a dead driver does not
hold for ever.

The lease is a numbered folder ``sweeps/<name>.driver/<n>/`` holding ``owner.json`` (host, pid, when it
started, its last heartbeat). Taking the sweep over is creating the next number with the share's atomic
folder create (``Share.mkdir_new``): of two processes that both find the driver gone, exactly one gets it,
and a driver that finds a number above its own knows it was taken over and stops. The driver is gone when
it released the lease, when it ran on this host and its process no longer exists, or when its heartbeat is
older than ``DRIVER_LEASE`` seconds (another host: its clock and this one's are compared).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime, timezone
from typing import Any

from .exceptions import NotFoundError, SweepDrivenError
from .share import Share, join

log = logging.getLogger("batchai_sdk")

DRIVER_LEASE = 60.0  # seconds without a heartbeat after which a driver on another host counts as gone
BEAT_EVERY = 5.0  # seconds between heartbeats (the driver's loop beats at most this often)
OWNER = "owner.json"


def _generations(share: Share, folder: str) -> list[int]:
    try:
        entries = share.list(folder)
    except NotFoundError:
        return []
    return sorted(int(e.name) for e in entries if e.is_dir and e.name.isdigit())


def _pid_alive(pid: Any) -> bool:
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process of that number: alive as far as we can tell
    return True


def describe(owner: dict[str, Any] | None, now: float | None = None) -> str:
    """``host 'h' pid 123 (since 2026-11-27T16:00:00Z, last heard from 3 s ago)``."""
    if not owner:
        return "a driver that is starting"
    now = time.time() if now is None else now
    beat = owner.get("beat")
    heard = f"{max(0.0, now - beat):.0f} s ago" if isinstance(beat, int | float) else "never"
    since = owner.get("started")
    return f"host {owner.get('host')!r} pid {owner.get('pid')} (since {since}, last heard from {heard})"


class DriverLease:
    """This process's lease on the sweep (``acquire``): ``beat()`` in its loop, ``release()`` at the end."""

    def __init__(self, share: Share, folder: str, generation: int, sweep: str) -> None:
        self.share = share
        self.folder = folder
        self.generation = generation
        self.sweep = sweep
        self.started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._last_beat = 0.0

    @property
    def path(self) -> str:
        return join(self.folder, f"{self.generation:06d}", OWNER)

    def _write(self, **extra: Any) -> None:
        owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started}
        self.share.write_json(self.path, {**owner, "beat": time.time(), **extra})

    def beat(self, *, force: bool = False) -> None:
        """Say this driver is alive (at most every ``BEAT_EVERY`` s); ``SweepDrivenError`` when another
        process took the sweep over meanwhile (this one was presumed gone)."""
        now = time.monotonic()
        if not force and now - self._last_beat < BEAT_EVERY:
            return
        newer = [g for g in _generations(self.share, self.folder) if g > self.generation]
        if newer:
            owner = self.share.read_json_or_none(join(self.folder, f"{newer[-1]:06d}", OWNER))
            raise SweepDrivenError(
                self.sweep,
                describe(owner),
                "it took the sweep over while this driver was not heard from; this one stops (the trials "
                "go on under the other)",
            )
        self._write()
        self._last_beat = now

    def release(self) -> None:
        """Hand the sweep back: the next ``run()`` anywhere takes it at once."""
        try:
            self._write(released=True)
        except Exception as exc:  # a share gone now: the lease expires by itself
            log.info("sweep %s: could not release its driver lease (%s); it expires", self.sweep, exc)


def _gone(share: Share, folder: str, generation: int, lease: float) -> tuple[bool, dict[str, Any] | None]:
    """Whether the driver of ``generation`` is gone, and what it wrote of itself."""
    owner = share.read_json_or_none(join(folder, f"{generation:06d}", OWNER))
    now = time.time()
    if not isinstance(owner, dict):  # just created, its owner.json not written yet: gone only if old
        info = share.stat(join(folder, f"{generation:06d}"))
        return info is None or info.modified is None or now - info.modified.timestamp() > lease, None
    if owner.get("released"):
        return True, owner
    if owner.get("host") == socket.gethostname() and not _pid_alive(owner.get("pid")):
        return True, owner
    beat = owner.get("beat")
    return not isinstance(beat, int | float) or now - beat > lease, owner


def acquire(share: Share, folder: str, sweep: str, *, lease: float = DRIVER_LEASE) -> DriverLease:
    """This process's lease on the sweep, or ``SweepDrivenError`` naming the live driver."""
    while True:
        generations = _generations(share, folder)
        following = 0
        if generations:
            top = generations[-1]
            gone, owner = _gone(share, folder, top, lease)
            if not gone:
                raise SweepDrivenError(
                    sweep,
                    describe(owner),
                    "one driver at a time; its trials go on there. run() again once it has stopped (a "
                    f"driver not heard from for {lease:g} s counts as gone), or run(wait_for_driver=True) "
                    "to wait and take over",
                )
            following = top + 1
        try:
            share.mkdir_new(join(folder, f"{following:06d}"))
        except FileExistsError:
            continue  # another process took it first: look again
        held = DriverLease(share, folder, following, sweep)
        held.beat(force=True)
        for old in generations[:-1]:  # keep the last one before ours, for who-was-it
            try:
                share.delete(join(folder, f"{old:06d}"), recursive=True)
            except Exception:  # noqa: S112 - tidying only
                continue
        return held
