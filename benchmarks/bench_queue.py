"""The cluster scheduler's queue on the local backend: N tiny jobs on 2 nodes.

Prints, side by side for jobs of 1 node and for a mix (every 5th job needs both nodes):
- wall time from the first submit to the last end against the ideal, the jobs' own node-seconds / nodes
  (goal ≤ 1.05×), both measured inside the jobs;
- the gap from a node freed (a job's last instruction there) to the next job's first one on it
  (goal < 0.5 s, median and 95th percentile);
- submit → running on an idle cluster (goal < 1 s, median).

    python benchmarks/bench_queue.py [--jobs 50] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from batchai_sdk import JobState, Workspace

COMMAND = 's=$(date +%s.%N); sleep {secs}; e=$(date +%s.%N); echo "$s $e $BATCHAI_JOB_NODES" > {out}/{name}'


def run_queue(jobs: int, secs: float, mixed: bool) -> tuple[float, float, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        ws = Workspace.local(root=Path(tmp) / "ws")
        exp = ws.create_experiment("bench")
        cluster = ws.create_cluster("c", nodes=2)
        t0 = time.time()
        handles = []
        for i in range(jobs):
            nodes = 2 if mixed and i % 5 == 0 else 1
            cmd = COMMAND.format(secs=secs, out=out, name=f"j{i:03d}")
            handles.append(
                exp.create_job(f"j{i:03d}", cluster=cluster, node_count=nodes, command_line=cmd).submit()
            )
        for job in handles:
            assert job.wait(timeout=600) is JobState.SUCCEEDED, job.status.failure_reason
        spans: dict[str, list[tuple[float, float]]] = {}
        node_seconds = 0.0
        last_end = t0
        for f in out.iterdir():
            start, end, nodes_csv = f.read_text().split()
            ids = nodes_csv.split(",")
            node_seconds += (float(end) - float(start)) * len(ids)
            last_end = max(last_end, float(end))
            for node in ids:
                spans.setdefault(node, []).append((float(start), float(end)))
        gaps = []
        for runs in spans.values():
            runs.sort()
            gaps += [b[0] - a[1] for a, b in itertools.pairwise(runs)]
        ws.close()
        return last_end - t0, node_seconds / 2, gaps


def submit_to_running(runs: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace.local(root=Path(tmp) / "ws")
        exp = ws.create_experiment("bench")
        cluster = ws.create_cluster("c", nodes=2)
        for i in range(runs):
            job = exp.create_job(f"s{i}", cluster=cluster, command_line="sleep 0.3")
            t0 = time.perf_counter()
            job.submit()
            while job.state is not JobState.RUNNING:
                time.sleep(0.005)
            times.append(time.perf_counter() - t0)
            job.wait(timeout=60)
        ws.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(f"{args.jobs} jobs of {args.seconds:g} s on 2 local nodes")
    print(f"{'jobs':<22}{'wall s':>9}{'ideal s':>9}{'ratio':>8}{'gap median s':>14}{'gap p95 s':>11}")
    for label, mixed in (("1 node each", False), ("mixed (1/5 on 2)", True)):
        wall, ideal, gaps = run_queue(args.jobs, args.seconds, mixed)
        p95 = sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else float("nan")
        med = statistics.median(gaps) if gaps else float("nan")
        print(f"{label:<22}{wall:>9.2f}{ideal:>9.2f}{wall / ideal:>7.3f}x{med:>14.3f}{p95:>11.3f}")
    times = submit_to_running(5)
    print(
        f"submit -> running (idle cluster): median {statistics.median(times):.3f} s, max {max(times):.3f} s"
    )


if __name__ == "__main__":
    main()
