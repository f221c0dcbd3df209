"""Waiting in tests, and processes as /proc shows them: ``wait_for`` a condition, ``read_pid`` from a file,
whether a pid (or one process, with its start time) still runs, a zombie counting as ended."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def wait_for(predicate: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    """Poll ``predicate`` until it is true; ``AssertionError`` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def read_pid(path: Path, timeout: float = 10) -> int:
    """The pid a process wrote into ``path``, once the file holds all of it (a writer creates the file
    before it writes the number, so a reader that only waited for the file can see it empty)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            text = ""
        if text.isdigit():
            return int(text)
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} holds no pid after {timeout} s: {text!r}")
        time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is gone for the user's purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def started_at(pid: int) -> str | None:
    """The process's start time (in clock ticks since boot), or None when there is none: with its pid,
    what names one process although pids are reused (this machine cycles through them in about a minute)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def still_running(pid: int, start: str | None) -> bool:
    """Whether the process that had ``pid`` and started at ``start`` still runs (a zombie has ended)."""
    return start is not None and started_at(pid) == start and pid_alive(pid)
