"""Time from a hang to its verdict, with the defaults: real PyTorch ranks over gloo on 2 local nodes, each
reporting a step (``log_metric``) every 0.3 s with a 2.5 s one every fourth, and printing a line every 2 s
whatever happens (so the old output rule, 600 s of silence, never fires). For each case: the bound (max(3 ×
the median step interval, 60 s)), the seconds from the last step to the notice, and who the notice names.

Cases: a rank sleeping in the loop, a rank stopped by SIGSTOP, a whole node stopped (its rank and the
SDK's shim), a collective skipped by one rank of three (it waits in a barrier), the same with two ranks
(``pair``: the flight recorder tells which strayed), and a healthy job with uneven steps (no notice
expected).

    python benchmarks/bench_hang_verdict.py [--hang-notice 600] [--cases sleep,sigstop,node,skip,pair,healthy]
                                            [--repeat N]

``--hang-notice 15`` lowers the steps rule's floor to 15 s for a quick run (the default is 600 s of output
silence before the first steps, and a 60 s floor once steps come).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from batchai_sdk import Job, Workspace  # noqa: E402
from hang_jobs import write_train  # noqa: E402

# the tests' training script (tests/hang_jobs.py); gloo's own default timeout, 30 minutes
GLOO_TIMEOUT = 1800
OLD_DEFAULT = 600.0


def metrics(job: Job) -> list[dict[str, float]]:
    path = Path(job.workspace.share.root) / job.paths.stdouterr / "metrics.jsonl"  # type: ignore[attr-defined]
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def run_case(ws: Workspace, train: Path, case: str, notice: float, n: int = 0) -> str:
    pids = train.parent / f"pids-{case}-{n}"
    pids.mkdir()
    mode = {"sleep": "sleep", "skip": "skip", "pair": "skip"}.get(case, "run")
    steps = 40 if case == "healthy" else 100000
    exp = ws.create_experiment("bench", exist_ok=True)
    cluster = ws.create_cluster("c", nodes=2, exist_ok=True)
    job = exp.create_job(f"{case}-{n}", cluster=cluster, node_count=2, toolkit="pytorch",
                         process_count=3 if case == "skip" else 2, python_script=str(train),
                         args=[mode, str(steps), str(GLOO_TIMEOUT), str(pids)], hang_notice=notice,
                         toolkit_settings={"communication_backend": "TCP"}).submit()  # fmt: skip
    stopped: list[int] = []
    try:
        while len(metrics(job)) < 3:
            time.sleep(0.2)
        if case in ("sigstop", "node"):
            ids = json.loads((pids / "rank-1.json").read_text())
            stopped = [ids["shim"], ids["pid"]] if case == "node" else [ids["pid"]]
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + (notice if case == "healthy" else 0) + 3 * OLD_DEFAULT
        seen = 0
        while time.monotonic() < deadline:
            st = job.status
            if st.notice or st.state.ended:
                break
            time.sleep(0.05)
        at = time.time()
        records = metrics(job)
        intervals = [b["time"] - a["time"] for a, b in itertools.pairwise(records)]
        bound = max(3 * statistics.median(intervals), min(60.0, notice)) if intervals else notice
        if case == "healthy":
            seen = 1 if job.status.notice else 0
            verdict = f"{seen} notice(s) in {len(records)} uneven steps; ended {job.status.state.value}"
            return f"{case:8} bound {bound:6.1f} s  {'-':>8}  old {OLD_DEFAULT:.0f} s  {verdict}"
        took = at - records[-1]["time"] if records else float("nan")
        named = (job.status.notice or "(none)").split(" — ")[1] if job.status.notice else "(no notice)"
        return f"{case:8} bound {bound:6.1f} s  {took:6.1f} s  old never (it prints every 2 s)  {named}"
    finally:
        for pid in reversed(stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if not job.state.ended:
            job.terminate()
            job.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hang-notice", type=float, default=OLD_DEFAULT)
    parser.add_argument("--cases", default="sleep,sigstop,node,skip,pair,healthy")
    parser.add_argument("--repeat", type=int, default=1, help="run each case this many times")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train = write_train(Path(tmp))
        ws = Workspace.local(root=Path(tmp) / "ws")
        try:
            floor = min(60.0, args.hang_notice)
            print(f"hang_notice={args.hang_notice:g} (the steps rule's floor: {floor:g} s)")
            for n in range(args.repeat):
                for case in args.cases.split(","):
                    print(run_case(ws, train, case, args.hang_notice, n), flush=True)
        finally:
            ws.close()


if __name__ == "__main__":
    main()
