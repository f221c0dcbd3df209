"""Every process of a job, on one node: found by the ``BATCHAI_JOB_TAG`` in its environment.

The launcher, mpirun, the rank shims, the ranks and whatever they start inherit the tag (mpirun exports
it to remote ranks), so a job's processes are found even after they left its process group or session
— the way Slurm's proctrack/linuxproc follows a job's process tree, without depending on the tree.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

from ..common import TAG_VAR


def tagged_pids(tag: str) -> list[int]:
    """Pids on this node whose environment holds ``BATCHAI_JOB_TAG=tag`` (this process excluded)."""
    needle = f"{TAG_VAR}={tag}".encode()
    me = os.getpid()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if entry.isdigit() and int(entry) != me and _environ_holds(entry, needle):
            found.append(int(entry))
    return found


def carries_tag(pid: int, tag: str) -> bool:
    """Whether process ``pid`` runs with ``BATCHAI_JOB_TAG=tag`` (one process's environment read, not
    every process's as ``tagged_pids`` reads them); False once it is gone or a zombie."""
    return _environ_holds(str(int(pid)), f"{TAG_VAR}={tag}".encode())


def _environ_holds(pid: str, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return False
    return needle in environ.split(b"\0")


def tagged_argvs(tag: str) -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of each process of the job on this node that is still there to be read."""
    for pid in tagged_pids(tag):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                yield pid, f.read().split(b"\0")
        except OSError:
            continue


def launcher_pid(tag: str) -> int | None:
    """The job's launcher on this (head) node, found by its tag and its mode (``… launch <folder>``)."""
    for pid, argv in tagged_argvs(tag):
        if b"launch" in argv[1:5] and any(mark in arg for arg in argv[:4] for mark in OURS):
            return pid
    return None


OURS = (b"batchai_node", b"batchai_sdk/node/")  # the node code: scheduler, launcher, rank shims
MPI_DAEMONS = (b"mpirun", b"mpiexec", b"orted", b"prted", b"prterun")


def rank_pids(tag: str) -> list[int]:
    """The job's own processes on this node — its ranks and what they started — without our launcher,
    rank shims and MPI's daemons (a notice meant for the ranks must reach each of them once)."""
    out = []
    for pid, argv in tagged_argvs(tag):
        if any(mark in arg for arg in argv[:3] for mark in OURS):
            continue
        if argv and os.path.basename(argv[0]) in MPI_DAEMONS:
            continue
        out.append(pid)
    return out


def signal_tagged(tag: str, sig: int) -> int:
    """Send ``sig`` to every process of the job on this node; returns how many were signalled."""
    count = 0
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, sig)
            count += 1
        except (ProcessLookupError, PermissionError):
            pass
    return count


def reap(tag: str, grace: float = 5.0) -> int:
    """End every process of the job on this node: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns how many are left (0 once the node is empty of the job; zombies of other parents count
    as gone since /proc keeps no environment for them).
    """
    if not signal_tagged(tag, signal.SIGTERM):
        return 0
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not tagged_pids(tag):
            return 0
        time.sleep(0.05)
    signal_tagged(tag, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if not tagged_pids(tag):
            return 0
        time.sleep(0.05)
    return len(tagged_pids(tag))
