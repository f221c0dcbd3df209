"""The cluster scheduler's processes, as /proc shows them, for tests that kill it at chosen moments: its pid
from its state folder, a process's parent and argv, and a kill -9 in its launch window; on a local workspace,
the state folder of cluster ``c``'s scheduler and its own row of a job."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from _procs import pid_alive
from batchai_sdk import Workspace


def cmdline(pid: int) -> list[bytes]:
    """A process's argv ([] once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def scheduler_pid(state: Path) -> int | None:
    """The pid of the scheduler whose folder is ``state`` (``… scheduler <state>``), if one runs."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and cmdline(int(entry))[3:5] == [b"scheduler", bytes(state)]:
            return int(entry)
    return None


def ppid(pid: int) -> int:
    """A process's parent (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def execed(pid: int) -> bytes:
    """The child's command line once it exec'd (a fork shows its parent's until then); b"" when gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return b""
        if argv and b"scheduler" not in argv.split(b"\0")[3:4]:
            return argv
        time.sleep(0.001)
    raise AssertionError(f"child {pid} of the scheduler did not exec")


def kill_scheduler_at_launch(state: Path, timeout: float = 60) -> bool:
    """Freeze the scheduler (SIGSTOP) as soon as it forks its next launcher, let the launcher exec, then
    kill -9 the scheduler: it dies between starting a launcher and anything it does after. False when no
    launcher appeared. The scheduler is looked up again whenever it changed (one that went idle exits,
    and the next request starts another)."""
    deadline = time.monotonic() + timeout
    sched: int | None = None
    seen: set[int] = set()
    while time.monotonic() < deadline:
        if sched is None or not pid_alive(sched):
            sched, seen = scheduler_pid(state), set()
            if sched is None:
                continue
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else 0
            # no "pid > sched" shortcut: pids wrap (pid_max is often 32768), a child may have a lower one
            if not pid or pid in seen or ppid(pid) != sched:
                continue
            seen.add(pid)
            os.kill(sched, signal.SIGSTOP)
            if b"launch" not in execed(pid).split(b"\0")[3:4]:  # ssh to a node, not a launcher
                os.kill(sched, signal.SIGCONT)
                continue
            os.kill(sched, signal.SIGKILL)
            return True
    return False


def state_dir(ws: Workspace) -> Path:
    return ws.backend.root / "tmp" / "scheduler" / "c"  # type: ignore[attr-defined,no-any-return]


def job_row(ws: Workspace, name: str) -> dict[str, Any]:
    """The scheduler's own row of the job (read-only: sched.db is in WAL mode, readers never block it)."""
    db = sqlite3.connect(f"file:{state_dir(ws) / 'sched.db'}?mode=ro", uri=True)
    try:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM jobs WHERE key = ?", (f"e/{name}",)).fetchone()
        return dict(row) if row else {}
    finally:
        db.close()
