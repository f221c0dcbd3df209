"""Time from a hang to its verdict, with the defaults: real PyTorch ranks over gloo on 2 local nodes, each
reporting a step (``log_metric``) every 0.3 s with a 2.5 s one every fourth, and printing a line every 2 s
whatever happens (so the old output rule, 600 s of silence, never fires). For each case: the bound (max(3 ×
the median step interval, 60 s)), the seconds from the last step to the notice, and who the notice names.

Cases: a rank sleeping in the loop, a rank stopped by SIGSTOP, a whole node stopped (its rank and the
SDK's shim), a collective skipped by one rank of three (it waits in a barrier), and a healthy job with
uneven steps (no notice expected).

    python benchmarks/bench_hang_verdict.py [--hang-notice 600] [--cases sleep,sigstop,node,skip,healthy]
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
import tempfile
import time
from pathlib import Path

from batchai_sdk import Job, Workspace

TRAIN = """\
import json, os, sys, threading, time
rank = int(os.environ["RANK"])
def chatter():
    while True:
        print(f"rank {rank}: prefetching", flush=True)
        time.sleep(2)
threading.Thread(target=chatter, daemon=True).start()
import torch, torch.distributed as dist
from batchai_sdk import log_metric
dist.init_process_group(backend="gloo", init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"], rank=rank,
                        world_size=int(os.environ["WORLD_SIZE"]))
mode, steps = sys.argv[1], int(sys.argv[2])
with open(os.path.join(sys.argv[3], f"rank-{rank}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "shim": os.getppid()}, f)
t = torch.ones(1)
for step in range(1, steps + 1):
    if mode == "sleep" and rank == 1 and step == 6:
        time.sleep(3600)
    if mode == "skip" and rank == 1 and step == 6:
        dist.barrier()
    else:
        dist.all_reduce(t)
    log_metric(step=step, loss=1.0 / step)
    time.sleep(0.3 if step % 4 else 2.5)
dist.destroy_process_group()
time.sleep(0.3)
"""
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
    mode = {"sleep": "sleep", "skip": "skip"}.get(case, "run")
    steps = 40 if case == "healthy" else 100000
    exp = ws.create_experiment("bench", exist_ok=True)
    cluster = ws.create_cluster("c", nodes=2, exist_ok=True)
    job = exp.create_job(f"{case}-{n}", cluster=cluster, node_count=2, toolkit="pytorch",
                         process_count=3 if case == "skip" else 2, python_script=str(train),
                         args=[mode, str(steps), str(pids)], hang_notice=notice,
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
            time.sleep(0.25)
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
    parser.add_argument("--cases", default="sleep,sigstop,node,skip,healthy")
    parser.add_argument("--repeat", type=int, default=1, help="run each case this many times")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp) / "train.py"
        train.write_text(TRAIN)
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
