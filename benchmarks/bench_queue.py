"""The cluster scheduler's queue on the local backend, each figure printed beside its goal.

- 50 jobs of 1 s on 2 nodes, of 1 node each and a mix (every 5th job needs both), through mpirun (a
  command line's default toolkit, custommpi), and of 1 node each with the custom toolkit (no mpirun: the
  scheduler's and launcher's own hand-off): wall time from the first
  submit to the last end against the ideal, the jobs' own node-seconds / nodes (goal <= 1.05x), both
  measured inside the jobs; and the hand-off, a node freed (a job's last instruction there) to the next
  job's first one on it (goal < 0.05 s median); with how many of the jobs ran in an MPI world their
  spare launcher started ahead (node/job/world.py: no mpirun start-up in the hand-off); and the cold
  start, the first submit to the first job's first instruction (the cluster made just before);
- submit -> running on an idle cluster (goal < 1 s, median);
- submit time against queue length: ``submit()`` of N jobs behind one that holds the only node, the first
  50 against the last 50 (goal: flat, ratio <= 1.2); then the scheduler's CPU over 20 s with the N queued
  (status records are rewritten only on change);
- ``import batchai_sdk`` in a fresh interpreter with its bytecode cached, median of 15 (goal <= 60 ms).

Timings are wall clock: on a shared or loaded machine they are noisy; run twice and read the medians.

    python benchmarks/bench_queue.py [--jobs 50] [--seconds 1.0] [--queue 1000]
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from batchai_sdk import JobState, Workspace

COMMAND = 's=$(date +%s.%N); sleep {secs}; e=$(date +%s.%N); echo "$s $e $BATCHAI_JOB_NODES" > {out}/{name}'
GOAL_RATIO, GOAL_GAP_S, GOAL_SUBMIT_RUN_S, GOAL_FLAT, GOAL_IMPORT_MS = 1.05, 0.05, 1.0, 1.2, 60.0


WORLD_NOTE = b"the job runs in the MPI world started ahead"


def run_queue(
    jobs: int, secs: float, mixed: bool, toolkit: str | None = None
) -> tuple[float, float, list[float], int, float]:
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
                exp.create_job(
                    f"j{i:03d}", cluster=cluster, node_count=nodes, command_line=cmd, toolkit=toolkit
                ).submit()
            )
        for job in handles:
            assert job.wait(timeout=600) is JobState.SUCCEEDED, job.status.failure_reason
        spans: dict[str, list[tuple[float, float]]] = {}
        node_seconds = 0.0
        last_end, first_start = t0, float("inf")
        for f in out.iterdir():
            start, end, nodes_csv = f.read_text().split()
            ids = nodes_csv.split(",")
            node_seconds += (float(end) - float(start)) * len(ids)
            last_end = max(last_end, float(end))
            first_start = min(first_start, float(start))
            for node in ids:
                spans.setdefault(node, []).append((float(start), float(end)))
        gaps = []
        for runs in spans.values():
            runs.sort()
            gaps += [b[0] - a[1] for a, b in itertools.pairwise(runs)]
        logs = (Path(tmp) / "ws").glob("mounts/share/.batchai/experiments/bench/jobs/*/stdouterr")
        in_world = sum(any(WORLD_NOTE in p.read_bytes() for p in d.glob("execution-*.log")) for d in logs)
        ws.close()
        return last_end - t0, node_seconds / 2, gaps, in_world, first_start - t0


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scheduler_pid(root: Path) -> int:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"scheduler" in argv and any(str(root).encode() in a for a in argv):
                return int(entry)
    raise RuntimeError("no scheduler process found")


def deep_queue(count: int, cpu_window: float) -> tuple[list[float], float]:
    """Per-submit seconds of ``count`` jobs queued behind one holding the only node; then the scheduler's
    CPU share over ``cpu_window`` seconds with them all queued."""
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        ws = Workspace.local(root=Path(tmp) / "ws")
        exp = ws.create_experiment("bench")
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        holder = exp.create_job("holder", cluster=cluster, command_line="sleep 3600").submit()
        times = []
        for i in range(count):
            job = exp.create_job(f"q{i:04d}", cluster=cluster, command_line="true")
            t0 = time.perf_counter()
            job.submit()
            times.append(time.perf_counter() - t0)
        pid = scheduler_pid(Path(tmp))
        time.sleep(2)  # past the last submit's own work
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(cpu_window)
        share = (cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        holder.terminate()
        os.kill(pid, signal.SIGTERM)  # the queue goes with it; its jobs were only "true"
        while Path(f"/proc/{pid}").exists() and b"zombie" not in Path(f"/proc/{pid}/status").read_bytes():
            time.sleep(0.1)
        ws.close()
    return times, share


def import_ms(runs: int = 15) -> list[float]:
    """``import batchai_sdk`` in fresh interpreters, bytecode cached (as an installed package has it)."""
    code = "import time; t = time.perf_counter(); import batchai_sdk; print(time.perf_counter() - t)"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-c", "import batchai_sdk"], env=env, check=True)
        return [
            1000 * float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                        check=True, text=True).stdout)
            for _ in range(runs)
        ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=50, help="0: skip the queue and submit figures")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--queue", type=int, default=1000, help="jobs queued for the submit-time figures")
    parser.add_argument("--cpu-window", type=float, default=20.0)
    args = parser.parse_args()
    print(f"{args.jobs} jobs of {args.seconds:g} s on 2 local nodes (load average {os.getloadavg()[0]:.1f})")
    print(f"{'jobs':<22}{'wall s':>9}{'ideal s':>9}{'ratio':>8}{'goal':>7}{'gap median s':>14}{'goal':>7}"
          f"{'gap p95 s':>11}{'in world':>10}{'first s':>9}")  # fmt: skip
    rows = (
        ("1 node each", False, None),
        ("mixed (1/5 on 2)", True, None),
        ("1 node, custom", False, "custom"),
    )
    for label, mixed, toolkit in rows if args.jobs else ():
        wall, ideal, gaps, in_world, first = run_queue(args.jobs, args.seconds, mixed, toolkit)
        p95 = sorted(gaps)[int(0.95 * (len(gaps) - 1))] if gaps else float("nan")
        med = statistics.median(gaps) if gaps else float("nan")
        print(
            f"{label:<22}{wall:>9.2f}{ideal:>9.2f}{wall / ideal:>7.3f}x{GOAL_RATIO:>6.2f}x"
            f"{med:>14.3f}{GOAL_GAP_S:>7.2f}{p95:>11.3f}{in_world:>7}/{args.jobs}{first:>9.3f}"
        )
    times = submit_to_running(5) if args.jobs else [float("nan")]
    print(
        f"submit -> running (idle cluster): median {statistics.median(times):.3f} s, max {max(times):.3f} s"
        f"   goal < {GOAL_SUBMIT_RUN_S:g} s"
    )
    if args.queue >= 100:
        per_submit, cpu = deep_queue(args.queue, args.cpu_window)
        first, last = statistics.median(per_submit[:50]), statistics.median(per_submit[-50:])
        print(
            f"submit() with {args.queue} queued: first 50 median {first * 1000:.0f} ms, last 50 median "
            f"{last * 1000:.0f} ms, ratio {last / first:.2f}   goal <= {GOAL_FLAT:g} (flat)"
        )
        print(f"scheduler CPU with {args.queue} queued, over {args.cpu_window:g} s: {cpu * 100:.1f}%")
    imports = import_ms()
    print(
        f"import batchai_sdk: median {statistics.median(imports):.0f} ms, min {min(imports):.0f} ms"
        f"   goal <= {GOAL_IMPORT_MS:g} ms"
    )


if __name__ == "__main__":
    main()
