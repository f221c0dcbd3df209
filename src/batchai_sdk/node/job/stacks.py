"""Python stacks of a job's processes on this node, for the hang watchdog (standard library only).

``find_job_python_pids(tag)`` finds the job's Python processes: every process of a job carries
``BATCHAI_JOB_TAG=<tag>`` in its environment (``procs.tagged_pids`` finds them); mpirun, shells and other
non-Python processes of the job are left out.

``collect_stacks(pids, out_path, timeout=...)`` writes ``stacks-<node>.txt`` (see ``stacks_file_name``):

* with py-spy installed (on PATH or beside this Python), ``py-spy dump --pid N`` for each process: the
  stacks of every thread, in the file;
* otherwise, or where py-spy fails for a process, SIGUSR1: the shipped training modules register
  ``faulthandler.register(signal.SIGUSR1, all_threads=True)``, so the process writes its stacks to its own
  stderr (the job's stderr.txt). The file says so. A process that does not catch SIGUSR1 is NOT signalled
  (SIGUSR1's default action would kill it); the file says that too.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from ..common import TAG_VAR
from .procs import tagged_pids

__all__ = [
    "JOB_TAG_VARIABLE",
    "collect_stacks",
    "find_job_python_pids",
    "find_py_spy",
    "handles_signal",
    "main",
    "stacks_file_name",
]

JOB_TAG_VARIABLE = TAG_VAR
AUTO = "auto"
_PYTHON_NAME_RE = re.compile(r"^python(\d+(\.\d+)*)?[dmu]*$")
_PROC = Path("/proc")


def stacks_file_name(node: str) -> str:
    """``stacks-<node>.txt``: the file name beside the job's logs for one node's stacks."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", node) or "node"
    return f"stacks-{safe}.txt"


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # the process ended, or belongs to another user
        return None


def _is_python(pid: int, proc: Path) -> bool:
    names = []
    try:
        names.append(os.path.basename(os.readlink(proc / str(pid) / "exe")))
    except OSError:
        pass
    cmdline = _read(proc / str(pid) / "cmdline")
    if cmdline:
        names.append(os.path.basename(cmdline.split(b"\0", 1)[0].decode(errors="replace")))
    return any(_PYTHON_NAME_RE.match(name) for name in names)


def find_job_python_pids(tag: str) -> list[int]:
    """Pids of the Python processes on this node whose environment holds ``BATCHAI_JOB_TAG=<tag>``.

    The job's processes come from ``procs.tagged_pids``; mpirun, shells and other non-Python ones are left
    out. Sorted; this process itself is never included; processes that end during the scan are skipped.
    """
    if not tag or "\0" in tag:
        raise ValueError(f"invalid job tag {tag!r}")
    return sorted(pid for pid in tagged_pids(tag) if _is_python(pid, _PROC))


def handles_signal(pid: int, signum: int, *, proc: Path = _PROC) -> bool:
    """Whether process ``pid`` catches ``signum`` (the SigCgt mask of /proc/<pid>/status)."""
    status = _read(proc / str(pid) / "status")
    if status is None:
        return False
    for line in status.decode(errors="replace").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split(":", 1)[1].strip(), 16) >> (signum - 1) & 1)
    return False


def find_py_spy() -> str | None:
    """py-spy on PATH, else beside this interpreter (a virtual environment's bin/), else None."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _cmdline(pid: int) -> str:
    raw = _read(_PROC / str(pid) / "cmdline") or b""
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)[:300]


def _py_spy_dump(py_spy: str, pid: int, timeout: float) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=max(1.0, timeout),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"py-spy dump timed out after {max(1.0, timeout):.0f} s"
    except OSError as exc:
        return False, f"py-spy could not run: {exc}"
    if done.returncode != 0:
        return False, f"py-spy dump exited {done.returncode}: {(done.stderr or done.stdout).strip()[:500]}"
    return True, done.stdout.rstrip()


def _faulthandler_signal(pid: int) -> str:
    if not handles_signal(pid, signal.SIGUSR1):
        return (
            "not signalled: the process does not catch SIGUSR1 (no faulthandler.register(signal.SIGUSR1)); "
            "SIGUSR1 would have killed it. No stacks."
        )
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return "the process ended before it could be signalled"
    except PermissionError as exc:
        return f"cannot signal it: {exc}"
    return (
        "sent SIGUSR1: faulthandler wrote the stacks of all its threads to the process's stderr (stderr.txt)"
    )


def collect_stacks(
    pids: Iterable[int],
    out_path: str | os.PathLike[str],
    *,
    timeout: float,
    py_spy: str | None = AUTO,
    node: str | None = None,
) -> str:
    """Write the Python stacks of ``pids`` to ``out_path`` (normally ``<stdouterr>/stacks-<node>.txt``).

    ``py_spy`` is the py-spy executable; ``"auto"`` looks for it (``find_py_spy``), None never uses it.
    ``timeout`` bounds the whole collection (seconds); processes not reached in time are listed as such.
    Returns ``out_path`` as a string. The file is written whole at the end (write to a temporary name, then
    rename), so a reader never sees half of it.
    """
    deadline = time.monotonic() + timeout
    tool = find_py_spy() if py_spy == AUTO else py_spy
    pid_list = list(pids)
    host = node or socket.gethostname()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    method = f"py-spy dump ({tool})" if tool else "faulthandler signal SIGUSR1 (py-spy is not installed)"
    lines = [f"# Python stacks on {host} at {now}", f"# method: {method}", f"# processes: {len(pid_list)}"]
    if not pid_list:
        lines.append("# no Python process of the job was found on this node")
    for pid in pid_list:
        lines += ["", f"=== pid {pid}: {_cmdline(pid) or '(ended)'}"]
        left = deadline - time.monotonic()
        if left <= 0:
            lines.append(f"skipped: the {timeout:g} s allowed for collecting stacks ran out")
            continue
        if tool:
            ok, text = _py_spy_dump(tool, pid, left)
            if ok:
                lines.append(text)
                continue
            lines.append(text)
            lines.append("falling back to the faulthandler signal:")
        lines.append(_faulthandler_signal(pid))
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    part.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(part, out)
    return str(out)


def main(argv: list[str] | None = None) -> int:
    """``stacks --tag TAG --out DIR [--node NAME] [--timeout S]``: what the scheduler runs on each node of a
    hung job (through its runner, with the node's Python, e.g. as a mode of the package's ``__main__``).
    Prints the file written."""
    parser = argparse.ArgumentParser(description="Write the Python stacks of a job's processes on this node.")
    parser.add_argument("--tag", required=True, help=f"the job's {JOB_TAG_VARIABLE} value")
    parser.add_argument("--out", required=True, help="folder for stacks-<node>.txt (the job's stdouterr/)")
    parser.add_argument("--node", default=None, help="node name in the file name (default: the host name)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds for the whole collection")
    args = parser.parse_args(argv)
    node = args.node or socket.gethostname()
    path = os.path.join(args.out, stacks_file_name(node))
    print(collect_stacks(find_job_python_pids(args.tag), path, timeout=args.timeout, node=node))
    return 0
