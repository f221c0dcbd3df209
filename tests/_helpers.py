"""Small helpers shared by test modules (importable as `_helpers`: tests/ is on pythonpath)."""

from __future__ import annotations

import os


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
