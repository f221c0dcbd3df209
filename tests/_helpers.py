"""Small helpers shared by test modules (importable as `_helpers`: tests/ is on pythonpath)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


# -- the cluster scheduler's processes, as /proc shows them (tests that kill it at chosen moments)
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


# The tutorial's job.json runs unchanged. Its jobPreparation (`apt update; apt install mpi-default-dev
# mpi-default-bin -y; pip install keras horovod`) was meant for a tensorflow:1.8.0 container; with no container
# runtime it runs on the host, where it would replace the pinned stack. These stand-ins go first on the job's
# PATH and log what they were asked to do.
TUTORIAL_SCRIPT = """
import argparse, os
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
parser = argparse.ArgumentParser()
parser.add_argument("-d", "--dir", help="directory to save model to")
args = parser.parse_args()
total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum)
print(f"rank {hvd.rank()} of {hvd.size()}: {int(total.numpy())} ranks answered", flush=True)
if hvd.rank() == 0:
    save_dir = os.path.join(args.dir, "saved_models")
    os.makedirs(save_dir, exist_ok=True)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.save(os.path.join(save_dir, "keras_cifar10_trained_model.h5"))
    print("Test accuracy:", 1.0)
"""


def stand_in_tools(folder: os.PathLike[str] | str, log: os.PathLike[str] | str) -> str:
    """Write `apt` and `pip` stand-ins into ``folder`` that append their command line to ``log``."""
    from pathlib import Path

    bin_dir = Path(folder)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("apt", "pip"):
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n')
        path.chmod(0o755)
    return str(bin_dir)


ENGINE_SCRIPT = r"""#!/bin/sh
# a stand-in container engine: records each call (arguments tab-separated) and runs `run`'s command on
# the host, so no image is ever pulled or started
line=$(printf '%s\t' "$(basename "$0")" "$@")
printf '%s\n' "$line" >> {log}
case "$1" in
  info) exit {info_code} ;;
  pull)
    if [ "{pull_seconds}" != "0" ]; then
      sleep {pull_seconds}  # a child of this shell: a timeout must kill the engine's whole group
    fi
    if [ -n "{pull_error}" ]; then
      echo "Trying to pull $2..."
      echo "Error: initializing source docker://$2: {pull_error}" >&2
      exit 125
    fi
    echo "Copying blob done" ;;
  run)
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        --rm) shift ;;
        --network|--ipc|--pid|--env-file|-w|-v|--gpus) shift 2 ;;
        *) break ;;
      esac
    done
    shift
    exec "$@" ;;
esac
"""


def stand_in_engine(
    folder: os.PathLike[str] | str,
    log: os.PathLike[str] | str,
    *,
    engine: str | None = "podman",
    pull_error: str = "",
    pull_seconds: float = 0,
) -> str:
    """Write `docker` and `podman` stand-ins into ``folder`` (put it first on the nodes' PATH): ``engine``
    answers (None: neither does), the other refuses as an engine without its daemon; every call is
    appended to ``log`` as a tab-separated line. ``pull`` takes ``pull_seconds``, then fails with
    ``pull_error`` when given; ``run``
    runs the rank's command on the host. A real docker or podman on the machine is never reached."""
    from pathlib import Path

    bin_dir = Path(folder)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in ("docker", "podman"):
        path = bin_dir / tool
        code = 0 if tool == engine else 1
        script = ENGINE_SCRIPT.format(
            log=log, info_code=code, pull_error=pull_error, pull_seconds=pull_seconds
        )
        path.write_text(script)
        path.chmod(0o755)
    return str(bin_dir)


def engine_calls(log: os.PathLike[str] | str, command: str | None = None) -> list[list[str]]:
    """The stand-in engine's calls, each as [tool, *argv], ``info`` left out; only ``command``'s if given."""
    from pathlib import Path

    path = Path(log)
    lines = path.read_text().splitlines() if path.exists() else []
    calls = [line.rstrip("\t").split("\t") for line in lines if line]
    return [c for c in calls if c[1:2] != ["info"] and (command is None or c[1:2] == [command])]


# A job that plants symbolic links in its own log folder: out of the share, to a folder of the share that
# is not the job's, and one within its logs (which readers follow).
PLANT_LINKS = (
    'cd "$AZ_BATCHAI_STDOUTERR_DIR" && ln -s /etc/passwd passwd.txt && ln -s /etc etc'
    ' && ln -s "$(dirname "$PWD")" parent && ln -s stdout.txt again.txt && echo hello'
)


def check_links_not_followed(job: object) -> None:
    """``tail``, ``stream``, ``files`` and ``download`` of a job that ran PLANT_LINKS read only its own
    files: links out of its folders are refused by name or left out of listings."""
    import pytest

    from batchai_sdk.exceptions import ValidationError
    from batchai_sdk.job import Job

    assert isinstance(job, Job)
    names = [f.name for f in job.files()]
    assert "stdout.txt" in names and "again.txt" in names
    assert not {"passwd.txt", "etc", "parent"} & set(names)
    assert job.tail("again.txt") == ["hello"]
    for name in ("passwd.txt", "etc/passwd", "parent/job.json"):
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.tail(name)
        with pytest.raises(ValidationError, match="leads out through a link"):
            list(job.stream(name, follow=False))
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.download(name, "/nonexistent-dest")
    for folder in ("etc", "parent"):
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.files(folder)


def local_cluster_config(share: Path, nodes: int, *, idle_exit_seconds: float = 0) -> dict[str, Any]:
    """A scheduler's cluster configuration for ``nodes`` nodes on this machine, its share at ``share``
    (as the local backend writes it), for tests that run the node code by hand."""
    import sys

    import batchai_sdk.node

    return {
        "cluster": "c",
        "nodes": [{"id": f"n{i}", "address": "localhost", "machine": "m", "slots": 1} for i in range(nodes)],
        "ssh_command": None,
        "python": sys.executable,
        "node_main": str(Path(batchai_sdk.node.__file__).parent / "__main__.py"),
        "meta_root": str(share / ".batchai"),
        "cluster_dir": str(share / ".batchai" / "clusters" / "c"),
        "env": {},
        "idle_exit_seconds": idle_exit_seconds,
    }


def recipe_mount_volumes() -> dict[str, Any]:
    """mountVolumes in the shape of Microsoft's recipes (Horovod-Tensorflow: a logs and a scripts share;
    batch scoring: a blob container), a fresh copy each call."""
    url = "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/"
    return {
        "azureFileShares": [
            {"azureFileUrl": url + "logs", "relativeMountPath": "logs"},
            {"azureFileUrl": url + "scripts", "relativeMountPath": "scripts"},
        ],
        "azureBlobFileSystems": [
            {
                "accountName": "<AZURE_BATCHAI_STORAGE_ACCOUNT>",
                "containerName": "data",
                "relativeMountPath": "data",
            }
        ],
    }
