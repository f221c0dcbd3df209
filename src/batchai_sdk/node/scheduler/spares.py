"""A launcher started ahead of its job, so that a node freed is a node busy again at once: Python's
start-up and the launcher's imports are paid while the previous job runs, not in the hand-off.

The spare is started with the environment the next job's launcher gets, its tag included (a process's
tag must be in the environment it was started with: ``procs`` finds it there), and waits on its standard
input. ``take()`` gives the job that spare (its tag becomes the attempt's tag); the job's folder is then
written to the spare's stdin and it runs as ``launch JOB_DIR`` would; ``refill()`` starts the next one
after that hand-off. A spare whose environment no longer matches the cluster's is let go (its stdin
closed: it exits at once), as is every spare when the scheduler exits or dies.

On the local backend the spare also pre-starts the MPI world of the job at the queue's head
(job/world.py): ``predict`` writes ``world {"launch": ..., "nodes": ..., "folder": ...}`` to its stdin
whenever the head changes (``world null`` when the queue is empty), and the spare starts that world,
replacing one it holds, while it waits for its job.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..common import TAG_VAR

if TYPE_CHECKING:
    from ..job.world import World
    from .cluster import Cluster
    from .store import Store

WORLDS = "spares"  # under the scheduler's folder: one folder per spare's world, named by its tag


@dataclass
class Spare:
    tag: str
    proc: subprocess.Popen[bytes]
    key: tuple[str, ...]
    world_for: str | None = field(default=None)  # the launch.json whose world it was told to start

    def tell(self, line: bytes) -> bool:
        if self.proc.poll() is not None or self.proc.stdin is None:
            return False
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except OSError:
            return False
        return True

    def go(self, job_dir: str) -> bool:
        """Hand the spare its job; False when it is gone (the caller starts a launcher itself)."""
        if self.proc.poll() is not None or self.proc.stdin is None:
            return False
        try:
            self.proc.stdin.write(job_dir.encode() + b"\n")
            self.proc.stdin.close()
        except OSError:
            return False
        return True

    def release(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)


class Spares:
    """At most one spare launcher at a time."""

    def __init__(self) -> None:
        self.spare: Spare | None = None
        self.predicted: tuple[int, int] | None = None  # (spare pid, database changes) predict last read

    def take(self, argv: list[str], env: dict[str, str]) -> Spare | None:
        """The spare for a launcher of ``argv`` (without its job folder) and ``env`` (without a tag), or
        None when there is none that fits (``refill`` starts the next one, after the hand-off)."""
        spare, self.spare = self.spare, None
        if spare is not None and (spare.key != _key(argv, env) or spare.proc.poll() is not None):
            spare.release()
            spare = None
        return spare

    def refill(self, argv: list[str], env: dict[str, str]) -> None:
        """Start a spare for the next job unless one that fits is waiting."""
        if self.spare is not None and self.spare.key == _key(argv, env) and self.spare.proc.poll() is None:
            return
        if self.spare is not None:
            self.spare.release()
        self.spare = start(argv, env, _key(argv, env))

    def close(self) -> None:
        if self.spare is not None:
            self.spare.release()
            self.spare = None

    def predict(self, store: Store, cluster: Cluster) -> None:
        """Have the waiting spare pre-start the MPI world of the job at the queue's head (local nodes
        only: there every node is this host, so the world does not depend on which node frees)."""
        spare = self.spare
        if spare is None or cluster.cfg.get("ssh_command") is not None or not cluster.cfg.get("nodes"):
            return
        seen = (spare.proc.pid, store.changes())
        if seen == self.predicted:  # no row changed since: the head is the same (a long queue is not
            return  # sorted again on every pass)
        self.predicted = seen
        head = store.queue_head()
        paths = cluster.share_paths()
        launch = paths.launch_config(head["experiment"], head["name"]) if head else None
        if launch == spare.world_for:
            return
        spare.world_for = launch
        folder = os.path.join(store.state_dir, WORLDS, spare.tag)
        request = {"launch": launch, "nodes": cluster.nodes(), "folder": folder} if launch else None
        spare.tell(b"world " + json.dumps(request).encode() + b"\n")


def _key(argv: list[str], env: dict[str, str]) -> tuple[str, ...]:
    return (*argv, *sorted(f"{k}={v}" for k, v in env.items()))


def start(argv: list[str], env: dict[str, str], key: tuple[str, ...]) -> Spare | None:
    tag = uuid.uuid4().hex
    try:
        proc = subprocess.Popen(
            [*argv, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**env, TAG_VAR: tag},
            start_new_session=True,
        )
    except OSError:
        return None
    return Spare(tag, proc, key)


def sweep(state_dir: str) -> None:
    """Remove the world folders of spares that are gone (a spare killed before it could)."""
    from ..job import procs

    root = os.path.join(state_dir, WORLDS)
    with contextlib.suppress(OSError):
        for tag in os.listdir(root):
            if not procs.tagged_pids(tag):
                shutil.rmtree(os.path.join(root, tag), ignore_errors=True)


def wait_for_job() -> tuple[str | None, World | None]:
    """In the spare: the job folder the scheduler hands over (None: let go) and the world pre-started
    for it, if any; the launcher's output goes to the job's log from then on."""
    import sys

    from ..job import world as worlds

    held: World | None = None
    for raw in sys.stdin:
        line = raw.strip()
        if not line.startswith("world "):
            break
        request: dict[str, Any] | None = json.loads(line[len("world ") :])
        if held is not None:
            held.end()
        held = worlds.start(request, dict(os.environ)) if request else None
    else:
        line = ""
    if not line:
        if held is not None:
            held.end(wait=False)
        return None, None
    fd = os.open(os.path.join(line, "launcher.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return line, held
