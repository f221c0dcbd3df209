"""Autoscale on a 2-node SSH cluster (sshd nodes on loopback): how late idle nodes go, how long growing takes.

Starts two real OpenSSH servers on 127.0.0.2 and 127.0.0.3 (as the SSH tests do; needs root and
openssh-server), opens ``Workspace.ssh`` on them, and makes a cluster with ``min_nodes=0, max_nodes=2``
and a short idle limit. Each round submits a 2-node job to the cluster at 0 nodes, waits for it to
succeed, then for the cluster's scheduler to release both nodes by itself (nobody calls it). It prints,
from the scheduler's own records (the job's end, the scaling events, one clock):

- release lateness: seconds from the idle limit being reached (the job's end + the limit) to the
  decision that released the nodes — the figure docs/cost.md quotes;
- grow: how long ``submit()`` took, and seconds from its start to the 0 → 2 decision and to the job
  running (the scheduler had exited at 0 nodes, so this includes starting it again over SSH).

    python benchmarks/bench_ssh_autoscale.py                 # about a minute
    python benchmarks/bench_ssh_autoscale.py --rounds 5 --idle 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ssh"))

from sshd import NODE_ADDRESSES, sshd_available, start_nodes  # noqa: E402

from batchai_sdk._models import JobState  # noqa: E402

LATE_GOAL_S = 2.0  # a node goes within this many seconds of its idle limit


def stamp(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="grow-run-shrink rounds (>= 1)")
    parser.add_argument("--idle", type=float, default=5.0, help="idle_seconds_before_scaledown")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a round may take")
    args = parser.parse_args()
    if not sshd_available() or os.geteuid() != 0:
        print("needs root and OpenSSH's sshd (apt-get install openssh-server)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="bench_autoscale_") as tmp:
        root = Path(tmp)
        share = root / "mnt" / "share"
        share.mkdir(parents=True)
        with start_nodes(root / "sshd", NODE_ADDRESSES[:2]) as nodes:
            ws = nodes.workspace("bench", root, nodes.addresses, share_path=str(share))
            with ws:
                exp = ws.create_experiment("bench")
                cluster = ws.create_cluster(
                    "auto",
                    vm_size="Standard_NC4as_T4_v3",
                    min_nodes=0,
                    max_nodes=2,
                    idle_seconds_before_scaledown=args.idle,
                )
                late: list[float] = []
                failed = False
                for i in range(max(1, args.rounds)):
                    seen = len(cluster.events())
                    job = exp.create_job(f"j{i}", cluster=cluster, node_count=2, command_line="sleep 1")
                    t0 = time.time()
                    job.submit()
                    submitted = time.time() - t0
                    while job.state is JobState.QUEUED and time.time() - t0 < args.timeout:
                        time.sleep(0.05)
                    running = time.time() - t0
                    state = job.wait(timeout=args.timeout, poll_interval=0.1)
                    end = job.status.end_time
                    deadline = time.monotonic() + args.timeout
                    while cluster.target_nodes != 0 and time.monotonic() < deadline:
                        time.sleep(0.1)
                    events = [e for e in cluster.events()[seen:] if "from" in e]
                    grow = next((e for e in events if e["to"] == 2), None)
                    shrink = next((e for e in events if e["to"] == 0), None)
                    if state is not JobState.SUCCEEDED or end is None or grow is None or shrink is None:
                        print(f"round {i + 1}: {state.value}, events {events}", file=sys.stderr)
                        failed = True
                        continue
                    late.append(stamp(shrink["time"]) - (end.timestamp() + args.idle))
                    print(
                        f"round {i + 1}: submit() {submitted:5.2f} s, "
                        f"grow decision at {stamp(grow['time']) - t0:5.2f} s, "
                        f"→ running {running:5.2f} s; nodes released {late[-1]:5.2f} s after the "
                        f"{args.idle:g} s idle limit ({shrink['reason']})"
                    )
                if late:
                    print(
                        f"\nrelease after the idle limit: median {statistics.median(late):.2f} s, "
                        f"max {max(late):.2f} s over {len(late)} round(s) (goal < {LATE_GOAL_S:g} s)"
                    )
                    if max(late) >= LATE_GOAL_S or min(late) < 0:
                        print("goal missed", file=sys.stderr)
                        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
