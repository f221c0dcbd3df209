"""Jobs for the hang verdict tests (tests/node/policy/test_verdict_local.py, tests/ssh/test_ssh_hang_verdict.py): real
PyTorch ranks over gloo that report a step (``log_metric``) every 0.3 s, a 2.5 s one every fourth, and print a
line every 2 s whatever happens; a mode makes rank 1 sleep in the loop or skip a collective."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from _procs import wait_for
from batchai_sdk import Job, Workspace
from batchai_sdk.exceptions import NotFoundError

NOTICE = 15.0  # hang_notice: the floor of the steps rule for these tests (60 s by default)

# line numbers matter: the verdicts below name train.py:SLEEP_LINE, :REDUCE_LINE and :BARRIER_LINE
TRAIN = """\
import json, os, sys, threading, time
rank = int(os.environ["RANK"])
def chatter():  # output that keeps coming while the steps stop: not progress
    while True:
        print(f"rank {rank}: prefetching", flush=True)
        time.sleep(2)
threading.Thread(target=chatter, daemon=True).start()
from datetime import timedelta
import torch, torch.distributed as dist
from batchai_sdk import log_metric
dist.init_process_group(backend="gloo", init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"], rank=rank,
                        world_size=int(os.environ["WORLD_SIZE"]), timeout=timedelta(seconds=float(sys.argv[3])))
mode, steps = sys.argv[1], int(sys.argv[2])
with open(os.path.join(sys.argv[4], f"rank-{rank}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "shim": os.getppid()}, f)
t = torch.ones(1)
for step in range(1, steps + 1):
    if mode == "sleep" and rank == 1 and step == 6:
        time.sleep(3600)
    if mode == "skip" and rank == 1 and step == 6:
        dist.barrier()  # instead of the all-reduce: the others wait in that, this rank in the barrier
    else:
        dist.all_reduce(t)
    log_metric(step=step, loss=1.0 / step)
    time.sleep(0.3 if step % 4 else 2.5)  # uneven steps: a slow batch every fourth
dist.destroy_process_group()
time.sleep(0.3)
"""
SLEEP_LINE, BARRIER_LINE, REDUCE_LINE = 19, 21, 23


def write_train(folder: Path) -> Path:
    """train.py in ``folder``, its line numbers checked."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.py"
    path.write_text(TRAIN)
    lines = TRAIN.splitlines()
    assert "time.sleep(3600)" in lines[SLEEP_LINE - 1] and "dist.barrier()" in lines[BARRIER_LINE - 1]
    assert "dist.all_reduce(t)" in lines[REDUCE_LINE - 1]
    return path


def start(ws: Workspace, train: Path, mode: str, *, ranks: int = 2, steps: int = 10000, gloo_timeout: int = 600,
          name: str | None = None, **options: object) -> Job:  # fmt: skip
    """The job (``name``, else ``mode``) on a 2-node cluster ``c`` of ``ws``, submitted (``options``: create_job's,
    e.g. environment)."""
    pids = train.parent / "pids"
    pids.mkdir(exist_ok=True)
    exp = ws.create_experiment("e", exist_ok=True)
    cluster = ws.create_cluster("c", nodes=2, exist_ok=True)
    return exp.create_job(name or mode, cluster=cluster, node_count=2, toolkit="pytorch", process_count=ranks,
                          python_script=str(train), args=[mode, str(steps), str(gloo_timeout), str(pids)],
                          toolkit_settings={"communication_backend": "TCP"},
                          hang_notice=options.pop("hang_notice", NOTICE), **options).submit()  # type: ignore[arg-type]  # fmt: skip


def rank_pids(job: Job, rank: int) -> dict[str, int]:
    """The rank's own pid and its shim's, as the script wrote them to the job's shared temp folder."""
    path = Path(job.spec.python_script or ".").parent / "pids" / f"rank-{rank}.json"
    found: dict[str, int] = {}

    def read() -> bool:
        try:
            found.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            return False
        return True

    wait_for(read, 120, f"rank {rank}'s pid")
    return found


def step_of(job: Job) -> int:
    """The job's last step, from its metrics.jsonl (0 before the first)."""
    try:
        lines = job.tail("metrics.jsonl", 1)
    except NotFoundError:
        return 0
    try:
        return int(json.loads(lines[-1])["step"]) if lines else 0
    except (ValueError, KeyError):
        return 0


def notice_within(job: Job, bound: float) -> tuple[str, float]:
    """Wait for the notice; returns it and the seconds from the last step to it."""
    wait_for(lambda: step_of(job) >= 1, 180, "the first step")
    last, seen = step_of(job), time.monotonic()
    deadline = time.monotonic() + bound + 240
    while time.monotonic() < deadline:
        notice = job.status.notice
        if notice:
            return notice, time.monotonic() - seen
        if step_of(job) != last:
            last, seen = step_of(job), time.monotonic()
        time.sleep(0.5)
    raise AssertionError(f"no notice within {bound} s of the last step (state {job.status.state})")


# Horovod, 3 ranks on 2 nodes: rank 1 broadcasts where the others all-reduce (a real deadlock; Horovod's
# stall warnings come every HOROVOD_STALL_CHECK_TIME_SECONDS and are evidence of it, not progress)
HOROVOD = """\
import os, threading, time
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
threading.Thread(target=lambda: [print("loading", flush=True) or time.sleep(2) for _ in iter(int, 1)], daemon=True).start()
import tensorflow as tf
import horovod.tensorflow as hvd
from batchai_sdk import log_metric
hvd.init()
for step in range(1, 10000):
    if rank == 1 and step == 6:  # a branch only rank 1 takes: a broadcast where the others all-reduce
        hvd.broadcast(tf.constant([1.0]), root_rank=0)
    else:
        hvd.allreduce(tf.constant([1.0]))
    log_metric(step=step, loss=1.0 / step)
    time.sleep(0.3)
"""
BROADCAST_LINE, ALLREDUCE_LINE = 10, 12


@contextlib.contextmanager
def second_node_stopped(job: Job) -> Iterator[None]:
    """Every process of the job on its second node (rank 1 and its shim) stopped, then continued."""
    pids = rank_pids(job, 1)
    for pid in (pids["shim"], pids["pid"]):
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in (pids["pid"], pids["shim"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def notices_until_it_ends(job: Job) -> list[str]:
    """The notices the job's status showed, polled until it ended."""
    seen: list[str] = []
    while not job.state.ended:
        if job.status.notice:
            seen.append(job.status.notice)
        time.sleep(0.5)
    return seen
