"""The scheduler's log: one timestamped line on its standard error, which ``ctl`` points at
``scheduler.log`` in the head node's state folder. A plain function, so that every part of the daemon
can say what it did without holding the daemon."""

from __future__ import annotations

import contextlib
import sys

from ..common import now


def log(line: str) -> None:
    """One timestamped line on stderr (the scheduler's log file); never raises."""
    with contextlib.suppress(OSError):
        sys.stderr.write(f"{now()} {line}\n")
        sys.stderr.flush()
