"""Local backend: submit→running latency of a 2-rank job (goal < 1 s) and the cost of ``import batchai_sdk``
over bare Python (goal < 0.2 s; no Azure SDK, TensorFlow, Horovod or paramiko imported eagerly).

    python benchmarks/bench_local_submit.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("azure", "tensorflow", "horovod", "paramiko", "numpy", "rich")


def import_cost(runs: int) -> tuple[float, float, list[str]]:
    def timed(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t0

    bare = statistics.median(timed("pass") for _ in range(runs))
    sdk = statistics.median(timed("import batchai_sdk") for _ in range(runs))
    probe = "import sys, batchai_sdk; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return bare, sdk, [m for m in loaded.split() if m in HEAVY]


def submit_to_running(runs: int) -> tuple[list[float], list[float]]:
    """Seconds from submit() to state running (the wrapper holds the nodes) and to both ranks started."""
    from batchai_sdk import JobState, Workspace

    times, ranks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "hold.py"
        script.write_text("import time\ntime.sleep(0.5)\n")
        ws = Workspace.local(root=Path(tmp) / "ws")
        exp = ws.create_experiment("bench")
        cluster = ws.create_cluster("c", nodes=2)
        for i in range(runs):
            job = exp.create_job(f"j{i}", cluster=cluster, node_count=2, python_script=str(script))
            t0 = time.perf_counter()
            job.submit()
            while job.state is JobState.QUEUED:
                time.sleep(0.01)
            times.append(time.perf_counter() - t0)
            while (
                sum(
                    " starting on " in line
                    for f in job.files()
                    if f.name.startswith("execution-")
                    for line in job.tail(f.name, 50)
                )
                < 2
            ):
                time.sleep(0.01)
            ranks.append(time.perf_counter() - t0)
            job.wait(timeout=120, poll_interval=0.1)
    return times, ranks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    bare, sdk, heavy = import_cost(opts.runs)
    print(f"python startup          {bare * 1000:7.1f} ms (median of {opts.runs})")
    print(f"python + batchai_sdk    {sdk * 1000:7.1f} ms")
    print(f"import batchai_sdk cost {(sdk - bare) * 1000:7.1f} ms   goal < 200 ms")
    print(f"heavy modules imported: {', '.join(heavy) or 'none'}")
    times, ranks = submit_to_running(opts.runs)
    print(
        f"submit→running, 2 ranks: median {statistics.median(times) * 1000:.0f} ms, "
        f"max {max(times) * 1000:.0f} ms over {len(times)} jobs   goal < 1000 ms"
    )
    print(
        f"submit→both ranks started: median {statistics.median(ranks) * 1000:.0f} ms, "
        f"max {max(ranks) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
