"""Python stacks of a job's processes on this node, for the hang watchdog (standard library only).

``find_job_python_pids(tag)`` finds the job's Python processes: every process of a job carries
``BATCHAI_JOB_TAG=<tag>`` in its environment (``procs.tagged_pids`` finds them); mpirun, shells and other
non-Python processes of the job are left out.

``collect_stacks(pids, out_path, timeout=...)`` writes ``stacks-<node>.txt`` (see ``stacks_file_name``):

* with py-spy installed (on PATH or beside this Python), ``py-spy dump --pid N`` for each process: the
  stacks of every thread, in the file;
* otherwise (or with ``BATCHAI_PY_SPY=off`` in the job's environment), or where py-spy fails for a
  process, SIGUSR1: the shipped training modules register ``faulthandler.register(signal.SIGUSR1,
  all_threads=True)``, so the process writes its stacks to its own stderr (the job's stderr.txt); the
  processes are signalled one at a time and each dump is read back from there (``parse_faulthandler``)
  into the same records as py-spy's. A process that does not catch SIGUSR1 is NOT signalled (SIGUSR1's
  default action would kill it); the file says so.
"""

from __future__ import annotations

import argparse
import json
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
from typing import Any

from ..common import TAG_VAR
from .procs import tagged_pids

__all__ = [
    "JOB_TAG_VARIABLE",
    "collect_stacks",
    "find_job_python_pids",
    "find_py_spy",
    "handles_signal",
    "main",
    "parse_faulthandler",
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


NO_PY_SPY_VARIABLE = "BATCHAI_PY_SPY"  # "off" in a job's environment: its stacks come from faulthandler
_OFF = ("0", "off", "no", "false")
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", "HOROVOD_RANK", "SLURM_PROCID")
_NODE_MAIN_TAIL = os.path.join("node", "__main__.py")
_INLINE = ("<string>", "<stdin>")  # code run by python -c or from stdin, but also code libraries exec


def _environ(pid: int) -> dict[str, str]:
    raw = _read(_PROC / str(pid) / "environ") or b""
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            out[key] = value
    return out


def _status_field(pid: int, name: str) -> str:
    for line in (_read(_PROC / str(pid) / "status") or b"").decode(errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def process_info(pid: int) -> dict[str, Any]:
    """Who process ``pid`` is in the job: its rank and node (from the variables the launcher gave it), its
    parent, whether it is stopped (SIGSTOP, a debugger) and whether it is one of the SDK's own processes
    (the launcher, the rank shims: their argv runs the node package's ``__main__.py``)."""
    env = _environ(pid)
    rank = next((int(env[v]) for v in _RANK_VARIABLES if env.get(v, "").strip().isdigit()), None)
    nodes = [n for n in env.get("BATCHAI_RANK_NODES", "").split(",")]
    node = nodes[rank] if rank is not None and rank < len(nodes) and nodes[rank] else None
    argv = [a.decode(errors="replace") for a in (_read(_PROC / str(pid) / "cmdline") or b"").split(b"\0")]
    state = _status_field(pid, "State")
    return {
        "pid": pid,
        "ppid": int(_status_field(pid, "PPid") or 0),
        "rank": rank,
        "node": node,
        "stopped": state.startswith(("T", "t")),
        "sdk": any(a.endswith(_NODE_MAIN_TAIL) for a in argv[:4]),
        "no_py_spy": env.get(NO_PY_SPY_VARIABLE, "").strip().lower() in _OFF,
    }


def _source_line(path: str, line: int) -> str:
    """The text of ``path``'s line ``line`` (stripped), or ""; read on the node, where the file is."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for no, text in enumerate(f, 1):
                if no == line:
                    return text.strip()[:120]
    except OSError:
        pass
    return ""


def is_user_file(path: str) -> bool:
    """Whether a frame's file is the user's: not the standard library, an installed package or the SDK."""
    norm = path.replace("\\", "/")
    if norm.startswith("<") or "/site-packages/" in norm or "/dist-packages/" in norm:
        return False
    return not ("/batchai_sdk/" in norm or re.search(r"/lib/python\d[\d.]*/", norm))


def _py_spy_json(py_spy: str, pid: int, timeout: float, stopped: bool) -> tuple[list[dict[str, Any]], str]:
    """The threads of ``pid`` from ``py-spy dump --json`` (frames innermost first), or [] and why not."""
    argv = [py_spy, "dump", "--json", "--full-filenames", "--pid", str(pid)]
    if stopped:  # py-spy cannot pause a stopped process: read it as it stands
        argv.insert(2, "--nonblocking")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=max(1.0, timeout), check=False)
    except subprocess.TimeoutExpired:
        return [], f"py-spy dump timed out after {max(1.0, timeout):.0f} s"
    except OSError as exc:
        return [], f"py-spy could not run: {exc}"
    try:
        raw = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        raw = None
    if not isinstance(raw, list):
        return [], f"py-spy dump exited {done.returncode}: {(done.stderr or done.stdout).strip()[:300]}"
    threads: list[dict[str, Any]] = []
    for t in raw:
        frames = _frames(
            (str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line") or 0))
            for f in t.get("frames") or []
        )
        main = t.get("os_thread_id") == pid
        name = "MainThread" if main and not t.get("thread_name") else t.get("thread_name")
        threads.append({"name": str(name or t.get("os_thread_id")), "frames": frames})
    return _main_first(threads), ""


def _frames(raw: Iterable[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Frames (function, file, line; innermost first) as the records hold them: whether each is the
    user's, and the source line of those that are."""
    frames: list[dict[str, Any]] = [
        {"func": func, "file": file, "line": line, "user": is_user_file(file)} for func, file, line in raw
    ]
    for f in reversed(frames):  # python -c's code: the outermost frames, all "<string>"
        if f["file"] not in _INLINE:
            break
        f["user"] = True
    for f in frames:
        if f["user"]:
            f["code"] = _source_line(f["file"], f["line"])
    return frames


def _main_first(threads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # the main thread first, then the threads running the user's code, then the rest
    threads.sort(key=lambda t: (t["name"] != "MainThread", not any(f["user"] for f in t["frames"])))
    return threads


DUMP_WAIT_S = 5.0  # how long a faulthandler dump may take to reach stderr.txt (through mpirun, a share)
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'File "(.*)", line (\d+) in (\S.*?)\s*$')


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _await_dump(path: Path, start: int, budget: float) -> str:
    """What ``path`` (the job's stderr.txt) gained after offset ``start`` once a faulthandler dump came
    and the file stopped growing (a quarter second), or by the end of ``budget`` seconds."""
    deadline = time.monotonic() + budget
    size, still = start, time.monotonic()
    text = ""
    while time.monotonic() < deadline:
        now = _size(path)
        if now != size:
            size, still = now, time.monotonic()
        elif size > start and time.monotonic() - still >= 0.25:
            text = _read_from(path, start, size)
            if _FH_THREAD.search(text) and text.endswith("\n"):
                return text
        time.sleep(0.05)
    return _read_from(path, start, _size(path))


def _read_from(path: Path, start: int, end: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max(0, min(end - start, 1 << 20))).decode(errors="replace")
    except OSError:
        return ""


def parse_faulthandler(text: str) -> list[dict[str, Any]]:
    """The threads of the first faulthandler dump in ``text`` (``Thread 0x... (most recent call first):``,
    then ``File "...", line N in func`` lines; lines of anything else, or with a launcher's prefix, are
    skipped), in the records' shape: the thread whose outermost frame is a module's top level (the script
    itself) named ``MainThread``, else the one that took the signal."""
    raw: list[tuple[str, bool, list[tuple[str, str, int]]]] = []
    for line in text.splitlines():
        head = _FH_THREAD.search(line)
        if head:
            if any(ident == head.group(2) for ident, _, _ in raw):
                break  # a second dump
            raw.append((head.group(2), head.group(1) == "Current thread", []))
            continue
        frame = _FH_FRAME.search(line)
        if frame and raw:
            raw[-1][2].append((frame.group(3), frame.group(1), int(frame.group(2))))
    threads: list[dict[str, Any]] = [{"name": ident, "frames": _frames(frames)} for ident, _, frames in raw]
    main = next((t for t in threads if t["frames"] and t["frames"][-1]["func"] == "<module>"), None)
    main = main or next((t for t, (_, current, _) in zip(threads, raw, strict=True) if current), None)
    if main is not None:
        main["name"] = "MainThread"
    return _main_first(threads)


def _frame_text(f: dict[str, Any]) -> str:
    code = f"    {f['code']}" if f.get("code") else ""
    return f"{os.path.basename(f['file'])}:{f['line']} {f['func']}{code}"


def _rank_lines(rec: dict[str, Any]) -> list[str]:
    """One process's stacks for the text file: its threads with the user's frames first, the library frames
    below them counted and named by their innermost one, the threads without any user frame folded."""
    out: list[str] = []
    folded = []
    for t in rec["threads"]:
        user = [f for f in t["frames"] if f["user"]]
        if not user and t["name"] != "MainThread":
            folded.append(t["name"])
            continue
        out.append(f'  thread "{t["name"]}":')
        out += [f"    {_frame_text(f)}" for f in user]
        lib = [f for f in t["frames"] if not f["user"]]
        if lib:
            inner = lib[0]
            out.append(
                f"    ({len(lib)} frame(s) in libraries, innermost {inner['func']} "
                f"({os.path.basename(inner['file'])}:{inner['line']}))"
            )
    if folded:
        out.append(f"  ({len(folded)} thread(s) without your code folded: {', '.join(folded[:12])})")
    return out


def collect_stacks(
    pids: Iterable[int],
    out_path: str | os.PathLike[str],
    *,
    timeout: float,
    py_spy: str | None = AUTO,
    node: str | None = None,
) -> str:
    """Write the Python stacks of ``pids`` to ``out_path`` (normally ``<stdouterr>/stacks-<node>.txt``) and
    the same as data beside it (``stacks-<node>.json``: one record per process, for the cross-rank verdict).

    Each process is labelled with its rank and node; processes the launcher placed on another node (the
    local backend runs every node on one machine) are left to that node's file; the SDK's own processes
    (launcher, rank shims) are folded into one line. ``py_spy`` is the py-spy executable; ``"auto"`` looks
    for it (``find_py_spy``), None never uses it. ``timeout`` bounds the whole collection (seconds);
    processes not reached in time are listed as such. Returns ``out_path`` as a string. The files are
    written whole at the end (write to a temporary name, then rename), so a reader never sees half of one.
    """
    deadline = time.monotonic() + timeout
    found = find_py_spy() if py_spy == AUTO else py_spy
    infos = [process_info(pid) for pid in pids]
    tool = None if any(i["no_py_spy"] for i in infos) else found
    if node:
        infos = [i for i in infos if i["node"] in (None, node)]
    sdk = [i for i in infos if i["sdk"]]
    infos = [i for i in infos if not i["sdk"]]
    rank_pids = {i["pid"] for i in infos if i["rank"] is not None}
    for i in infos:  # a rank's helper processes (data loader workers) are its children of the same rank
        i["helper"] = i["ppid"] in rank_pids
    infos.sort(key=lambda i: (i["rank"] is None, i["rank"] or 0, i["helper"], i["pid"]))
    host = node or socket.gethostname()
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    why = f"{NO_PY_SPY_VARIABLE}=off in the job's environment" if found else "py-spy is not installed"
    method = f"py-spy dump ({tool})" if tool else f"faulthandler signal SIGUSR1 ({why})"
    lines = [f"# Python stacks on {host} at {now}", f"# method: {method}", f"# processes: {len(infos)}"]
    if sdk:
        lines.append(f"# the SDK's own processes folded: pids {', '.join(str(i['pid']) for i in sdk)}")
    if not infos:
        lines.append("# no Python process of the job was found on this node")
    records: list[dict[str, Any]] = []
    for info in infos:
        pid = info["pid"]
        who = f"rank {info['rank']}" if info["rank"] is not None else "a process"
        where = info["node"] or host
        flags = ", stopped (SIGSTOP or a debugger)" if info["stopped"] else ""
        flags += ", a helper process of its rank" if info["helper"] else ""
        lines += ["", f"=== {who} on {where} (pid {pid}{flags}): {_cmdline(pid) or '(ended)'}"]
        rec = {**info, "node": where, "threads": [], "error": ""}
        records.append(rec)
        left = deadline - time.monotonic()
        if left <= 0:
            rec["error"] = f"skipped: the {timeout:g} s allowed for collecting stacks ran out"
            lines.append(rec["error"])
            continue
        if tool:
            rec["threads"], rec["error"] = _py_spy_json(tool, pid, left, info["stopped"])
            if rec["threads"]:
                lines += _rank_lines(rec)
                continue
            if not rec["error"].startswith("py-spy dump exited"):
                lines.append(rec["error"])
            else:  # an older py-spy without --json: its text
                ok, text = _py_spy_dump(tool, pid, left)
                lines.append(text)
                if ok:
                    continue
            lines.append("falling back to the faulthandler signal:")
        if info["stopped"]:
            rec["error"] = "stopped: no stacks without py-spy"
            lines.append(rec["error"])
            continue
        stderr = Path(out_path).parent / "stderr.txt"
        before = _size(stderr)
        said = _faulthandler_signal(pid)
        lines.append(said)
        if said.startswith("sent SIGUSR1"):
            rec["threads"] = parse_faulthandler(_await_dump(stderr, before, min(DUMP_WAIT_S, left)))
            if rec["threads"]:
                rec["error"] = ""
                lines += _rank_lines(rec)
                continue
        rec["error"] = rec["error"] or "stacks in stderr.txt (faulthandler)"
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = out.with_suffix(".json")
    for path, text in (
        (data, json.dumps({"node": host, "processes": records})),
        (out, "\n".join(lines) + "\n"),
    ):
        part = path.with_name(path.name + ".part")
        part.write_text(text, encoding="utf-8")
        os.replace(part, path)
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
