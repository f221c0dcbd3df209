"""Recovery after an eviction, on the local backend and on a 2-node SSH cluster (sshd nodes on loopback).

A 2-node job runs a stand-in for training that prints one line per second and, on SIGTERM, "checkpoints"
and exits 143. Once its first line is out, ``cluster.simulate_eviction(<its second node>)`` leaves a
``Preempt`` notice; the benchmark then prints, per run:

* notice → requeued: seconds from the ``simulate_eviction`` call until the client sees the job requeued
  (its first attempt recorded as ``evicted``; the job ``queued`` for attempt 2, or already past it);
* back → first line: seconds from then until attempt 2's first output line in ``stdout.txt``. With
  ``simulate_eviction`` the node itself stays (on Azure a real eviction deletes the VM and the cluster's
  size brings one back), so the node is back the moment the evicted attempt is cleaned up and requeued:
  this is the scheduler's restart latency, without a VM's boot;
* notice → first line: the two together.

With ``--train`` the job is ``batchai_sdk.train.cifar10_torch`` on digits (2 DDP ranks) instead, evicted
after its first epoch line, and the last figure runs to attempt 2's first new epoch line.

The SSH part starts two real OpenSSH servers on 127.0.0.2 and 127.0.0.3, as the SSH tests do (needs root
and openssh-server); ``--backend local`` skips it.

    python benchmarks/bench_recovery.py                    # local and SSH, 3 runs each: about a minute
    python benchmarks/bench_recovery.py --backend local --runs 5
    python benchmarks/bench_recovery.py --train --runs 1   # minutes: real training, resumed
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ssh"))

from sshd import NODE_ADDRESSES, sshd_available, start_nodes  # noqa: E402

from batchai_sdk import JobState, Workspace  # noqa: E402
from batchai_sdk.job import Job  # noqa: E402

STAND_IN = """\
import os, signal, sys, time
attempt = os.environ["AZ_BATCHAI_JOB_RESTART_COUNT"]
def checkpoint(signum, frame):
    print(f"attempt {attempt}: checkpointed on SIGTERM", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, checkpoint)
for second in range(90 if attempt == "0" else 3):
    print(f"attempt {attempt} line {second}", flush=True)
    time.sleep(1)
"""
TORCH_ARGS = ["--dataset", "digits", "--epochs", "3", "--lr", "1e-3", "--warmup-epochs", "0", "--seed", "1",
              "--no-augmentation"]  # fmt: skip
EPOCH_LINE = re.compile(r"^Epoch \d+/\d+ - loss")


@dataclass
class Figures:
    requeued: float
    first_line: float

    @property
    def total(self) -> float:
        return self.requeued + self.first_line


def _wait(condition: Callable[[], bool], timeout: float, what: str, job: Job) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline or job.state in (JobState.FAILED, JobState.SUCCEEDED):
            raise RuntimeError(f"{what}: not seen after {timeout:g} s (job {job.state.value}, "
                               f"{job.status.failure_reason}): {job.tail('stderr.txt', 20)}")  # fmt: skip
        time.sleep(0.05)


def _lines(job: Job) -> list[str]:
    return job.tail("stdout.txt", 200) if any(f.name == "stdout.txt" for f in job.files()) else []


def one_run(ws: Workspace, name: str, script: Path, train: bool, timeout: float) -> Figures:
    """Submit, evict the job's second node after its first line (or epoch), and time the recovery."""
    exp = ws.create_experiment("bench", exist_ok=True)
    cluster = ws.get_cluster("c")
    if train:
        out = ["--dir", f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{name}"]
        job = exp.create_job(name, cluster=cluster, node_count=2, toolkit="pytorch",
                             python_script="batchai_sdk.train.cifar10_torch",
                             args=[*out, *TORCH_ARGS]).submit()  # fmt: skip

        def started(attempt: int) -> bool:
            lines = _lines(job)
            restarted = any(line.startswith("Restart 1 ") for line in lines)
            return (restarted == (attempt == 1)) and any(EPOCH_LINE.match(line) for line in lines)
    else:
        job = exp.create_job(name, cluster=cluster, node_count=2, python_script=str(script)).submit()

        def started(attempt: int) -> bool:
            return any(line.startswith(f"attempt {attempt} line") for line in _lines(job))

    _wait(lambda: started(0), timeout, "attempt 1's first line", job)
    node = job.status.nodes[1]
    t0 = time.perf_counter()
    cluster.simulate_eviction(node, grace_seconds=30)
    _wait(lambda: bool(job.attempts), timeout, "the requeue", job)
    t1 = time.perf_counter()
    _wait(lambda: started(1), timeout, "attempt 2's first line", job)
    t2 = time.perf_counter()
    state = job.wait(timeout=timeout, poll_interval=0.2)
    attempts = job.attempts
    if state is not JobState.SUCCEEDED or attempts[0]["cause"] != "evicted" or len(attempts) != 2:
        raise RuntimeError(f"{name}: {state.value}, attempts {attempts}")
    return Figures(t1 - t0, t2 - t1)


def report(backend: str, figures: list[Figures]) -> None:
    for i, f in enumerate(figures, 1):
        print(f"{backend:5s} run {i}: notice → requeued {f.requeued:5.2f} s   back → first line "
              f"{f.first_line:5.2f} s   notice → first line {f.total:5.2f} s")  # fmt: skip
    if len(figures) > 1:
        med = statistics.median
        print(f"{backend:5s} median: notice → requeued {med(f.requeued for f in figures):5.2f} s   "
              f"back → first line {med(f.first_line for f in figures):5.2f} s   "
              f"notice → first line {med(f.total for f in figures):5.2f} s")  # fmt: skip


@contextlib.contextmanager
def local_workspace(root: Path) -> Iterator[Workspace]:
    ws = Workspace.local(root=root / "ws")
    try:
        yield ws
    finally:
        ws.close()


@contextlib.contextmanager
def ssh_workspace(root: Path) -> Iterator[Workspace]:
    share = root / "mnt" / "share"
    share.mkdir(parents=True)
    with start_nodes(root / "sshd", NODE_ADDRESSES[:2]) as nodes:
        ws = nodes.workspace("bench", root, nodes.addresses, share_path=str(share))
        with ws:
            yield ws


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["local", "ssh", "both"], default="both")
    parser.add_argument("--runs", type=int, default=3, help="evictions per backend (default: 3)")
    parser.add_argument(
        "--train", action="store_true", help="cifar10_torch on digits instead of the stand-in"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds any one wait may take")
    args = parser.parse_args()
    backends = ["local", "ssh"] if args.backend == "both" else [args.backend]
    if "ssh" in backends and (not sshd_available() or os.geteuid() != 0):
        print(
            "SSH part skipped: needs root and OpenSSH's sshd (apt-get install openssh-server)",
            file=sys.stderr,
        )
        backends.remove("ssh")
    what = (
        "cifar10_torch on digits (first epoch line)" if args.train else "a stand-in printing a line a second"
    )
    print(f"2-node job: {what}; simulate_eviction of its second node, grace 30 s")
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix=f"bench_recovery_{backend}_") as tmp:
            root = Path(tmp)
            script = root / "stand_in.py"
            script.write_text(STAND_IN)
            opener = local_workspace if backend == "local" else ssh_workspace
            with opener(root) as ws:
                ws.create_cluster("c", nodes=2)
                figures = [one_run(ws, f"r{i}", script, args.train, args.timeout) for i in range(args.runs)]
            report(backend, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
