"""A local custom job's rank shim, forked from the launcher instead of started as a new Python: the
launcher has every module the shim needs loaded, so the job's command starts without an interpreter's
start-up in the hand-off. The child is what ``python -S __main__.py rank CONFIG`` would be: its own
session, the job's environment, working folder and log files, default signal dispositions (the shim
installs its own), and ``rank.run_rank``'s result as its exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import IO


class ForkedRank:
    """The forked shim, watched the way ``subprocess.Popen`` is (``pid``, ``poll``, ``wait``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL  # reaped elsewhere: it is gone, its status with it
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["rank"], timeout or 0)
            time.sleep(delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode


def fork_rank(config_path: str, env: dict[str, str], cwd: str, out: IO[bytes], err: IO[bytes]) -> ForkedRank:
    """Fork the shim of the job's one local rank (the caller holds no other threads)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedRank(pid)
    code = 127
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(cwd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        os.environ.clear()
        os.environ.update(env)
        from .rank import run_rank

        code = run_rank(config_path)
    except BaseException as exc:
        try:
            os.write(2, f"the rank shim failed: {exc!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code & 0xFF)
