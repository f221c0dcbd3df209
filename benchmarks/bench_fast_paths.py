"""One process per figure, for ``farm-bench --vs``: each fast path of the local backend against its fallback.

- ``queue``: ``--jobs`` jobs of ``--seconds`` each, one node each, queued at once on a 2-node local cluster,
  from the workspace's creation to the last job's end. Run against a copy of the package whose fast path is
  cut off (``PYTHONPATH=COPY``: the node code the cluster runs is staged from the package imported), it
  times the spare launcher (``scheduler/spares.py``) against a launcher started per job, the pre-started
  MPI world (``job/world.py``) against the job's own ``mpirun`` (``--toolkit custommpi``), and the forked
  shim (``job/forked.py``) against a new Python (``--toolkit custom``).
- ``calls``: ``--calls`` requests to a local cluster's running scheduler, on its socket (the client's
  direct call) or, with ``--ctl``, through ``ctl`` as every other backend reaches its scheduler.

    farm-bench -n 5 --vs 'python benchmarks/bench_fast_paths.py calls --ctl' -- \\
        python benchmarks/bench_fast_paths.py calls
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from batchai_sdk import Workspace
from batchai_sdk.backends.head_scheduler import HeadNodeScheduler


def queue(jobs: int, seconds: float, toolkit: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        ws = Workspace.local(root=Path(tmp) / "ws")
        exp = ws.create_experiment("bench")
        cluster = ws.create_cluster("c", nodes=2)
        handles = [
            exp.create_job(
                f"j{i:03d}", cluster=cluster, node_count=1, command_line=f"sleep {seconds}", toolkit=toolkit
            )
            for i in range(jobs)
        ]
        for job in handles:
            job.submit()
        for job in handles:
            state = job.wait(timeout=300, poll_interval=0.05)
            if state != "succeeded":
                raise SystemExit(f"{job.name}: {state}")
        return time.perf_counter() - t0


def calls(count: int, ctl: bool) -> float:
    if ctl:  # the fallback, as on every other backend: no socket to connect to, so ctl is run
        HeadNodeScheduler.call_direct = lambda *args: None  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace.local(root=Path(tmp) / "ws")
        cluster = ws.create_cluster("c", nodes=2)
        scheduler = ws.backend.scheduler(cluster.spec)
        scheduler.ensure_running()
        t0 = time.perf_counter()
        for _ in range(count):
            scheduler.ensure_running()
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    q = sub.add_parser("queue")
    q.add_argument("--jobs", type=int, default=12)
    q.add_argument("--seconds", type=float, default=0.1)
    q.add_argument("--toolkit", default="custommpi", choices=("custom", "custommpi"))
    c = sub.add_parser("calls")
    c.add_argument("--calls", type=int, default=20)
    c.add_argument("--ctl", action="store_true")
    args = parser.parse_args()
    if args.what == "queue":
        print(f"{args.jobs} jobs ({args.toolkit}): {queue(args.jobs, args.seconds, args.toolkit):.2f} s")
    else:
        took = calls(args.calls, args.ctl)
        print(
            f"{args.calls} calls ({'ctl' if args.ctl else 'direct'}): {took / args.calls * 1000:.1f} ms each"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
