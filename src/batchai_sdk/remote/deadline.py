"""A caller's deadline for the remote reads made on its behalf: ``job.wait(timeout=T)`` keeps T even when
the share's host stops answering.

``with io_deadline(when):`` (a ``time.monotonic()`` instant) bounds every SSH connect and SFTP request the
calling thread makes inside it by the time left (never less than ``FLOOR`` seconds, so that one read just
past the instant can still answer); outside one, each keeps its own timeout. A context variable, so a
thread or task sees only its own caller's deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

FLOOR = 0.5  # seconds: the least one request is given, also past the deadline

_deadline: ContextVar[float | None] = ContextVar("batchai_io_deadline", default=None)


@contextmanager
def io_deadline(when: float | None) -> Iterator[None]:
    """Remote reads inside end by ``when`` (monotonic seconds; None: no deadline, each its own timeout).
    An outer, earlier deadline still holds."""
    outer = _deadline.get()
    token = _deadline.set(when if outer is None or (when is not None and when < outer) else outer)
    try:
        yield
    finally:
        _deadline.reset(token)


def bounded(timeout: float) -> float:
    """``timeout``, or less when the caller's deadline comes first (at least ``FLOOR``)."""
    when = _deadline.get()
    if when is None:
        return timeout
    return max(FLOOR, min(timeout, when - time.monotonic()))


def passed() -> bool:
    """The caller's deadline has passed (never, outside ``io_deadline``)."""
    when = _deadline.get()
    return when is not None and time.monotonic() >= when
