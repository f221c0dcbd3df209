"""Goodput under faults (issue 34): a 2-node checkpointing job on a 3-node cluster of namespace nodes
(``tests/nsnodes.py``: each node its own network, PID and mount namespaces, sshd on port 22), with a fault
every ``--fault-every`` seconds, the kinds taken in turn:

* ``power_off``   the second node of the job's attempt powered off (its PID 1 killed, its link down);
  powered on again once the job resumed elsewhere, so the cluster keeps a spare;
* ``partition``   that node's link taken down (its processes run on, cut off); healed once resumed;
* ``evict``       ``job.inject_fault("evict")``: SIGTERM, the ranks checkpoint, the job is requeued;
* ``kill_rank``   ``job.inject_fault("kill_rank", rank=1)``: exit 137, listed in ``retry_on_exit_codes``;
* ``head_power_off`` the head node (the one whose scheduler holds the cluster: ``head.json``) powered off;
  another node takes the scheduler over (``--no-head`` leaves this kind out).

The job is a stand-in for training: one step every ``--step-seconds`` (``log_metric(step)`` by rank 0), a
checkpoint every ``--checkpoint-seconds`` (rank 0, atomically) and on SIGTERM; a later attempt resumes after
the checkpoint's step. Printed per fault: fault → first step of the new attempt, the steps repeated (those
since the last checkpoint) and lost (never run; 0 when resume works); per kind their p50/p95; and the job's
goodput (``job.goodput``: productive step time / wall time). Beside it the same run modelled as a peer
restarts it by hand (``sky jobs``-style: a new cluster, from scratch, no checkpoint): every fault costs the
steps done so far plus the measured time from a fresh submit to its first step.

Needs root (namespaces, veth pairs) and openssh-server, as the namespace-node tests do.

    python benchmarks/bench_goodput.py                          # 20 minutes, a fault a minute
    python benchmarks/bench_goodput.py --minutes 5 --fault-every 45
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from batchai_sdk import JobState, Workspace  # noqa: E402
from batchai_sdk import _layout as layout  # noqa: E402
from batchai_sdk._goodput import AttemptLoss  # noqa: E402
from batchai_sdk.job import Job  # noqa: E402
from nsnodes import NodesUnavailable, NSNode, NSNodes, start_nodes  # noqa: E402

STEPPER = """\
import json, os, signal, sys, time
from batchai_sdk import log_metric
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
folder, steps, step_s, every_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ckpt = os.path.join(folder, "ckpt.json")
def save(step):
    if rank == 0:
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)
done = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        done = json.load(f)["step"]
def on_term(signum, frame):
    save(done)
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
saved_at = time.monotonic()
for step in range(done + 1, steps + 1):
    time.sleep(step_s)
    done = step
    if rank == 0:
        log_metric(step, loss=1.0 / step)
    if time.monotonic() - saved_at >= every_s:
        save(step)
        saved_at = time.monotonic()
"""
KINDS = ("power_off", "partition", "evict", "kill_rank", "head_power_off")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def steps_of(job: Job, since: float = 0.0) -> list[tuple[int, float]]:
    return sorted((r for r in job._step_records() if r[1] >= since), key=lambda r: r[1])


def wait(condition: Callable[[], bool], timeout: float, what: str) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            print(f"  (gave up waiting for {what} after {timeout:.0f} s)", flush=True)
            return False
        time.sleep(0.25)
    return True


def head_node(ws: Workspace, nodes: NSNodes) -> NSNode:
    """The node whose scheduler holds the cluster now (its head lease), else the first host."""
    lease = ws.share.read_json_or_none(layout.SHARE.head_record("c")) or {}
    address = str(lease.get("node") or nodes.addresses[0])
    return nodes.by_address(address)


def fresh_start_seconds(ws: Workspace, script: Path, out: Path, step_s: float) -> float:
    """A new job from scratch: submit → its first step (the peer's restart, less a new cluster's boot)."""
    out.mkdir(exist_ok=True)
    exp = ws.create_experiment("peer", exist_ok=True)
    began = time.time()
    command = f"{sys.executable} {script} {out} 3 {step_s} 1000"
    job = exp.create_job("fresh", cluster="c", node_count=2, command_line=command).submit()
    job.wait(timeout=300)
    steps = steps_of(job)
    return steps[0][1] - began if steps else float("nan")


def one_fault(job: Job, kind: str, target: NSNode, node_id: str) -> dict[str, Any]:
    """Do one fault; wait for the next attempt's first step; its figures."""
    before = steps_of(job)
    done_before = before[-1][0] if before else 0
    attempts_before = len(job.attempts)
    fault_t = time.time()
    if kind in ("power_off", "head_power_off"):
        target.power_off()
    elif kind == "partition":
        target.link_down()
    elif kind == "evict":
        job.inject_fault("evict", node=node_id, grace_seconds=30)
    else:
        job.inject_fault("kill_rank", rank=1)

    def resumed() -> list[tuple[int, float]]:
        started = job.status.start_time  # the attempt running now
        if len(job.attempts) <= attempts_before or started is None:
            return []
        return steps_of(job, max(fault_t, started.timestamp()))

    row: dict[str, Any] = {"kind": kind, "node": target.name, "at_step": done_before}
    if wait(lambda: bool(resumed()) or job.state.ended, 600, f"the first step after {kind}"):
        first = resumed()
        if first:
            row["resume_s"] = first[0][1] - fault_t
            row["repeated"] = max(0, done_before - first[0][0] + 1)
    return row


def print_split(rows: list[dict[str, Any]], lost: tuple[AttemptLoss, ...]) -> None:
    """Each fault's cost as ``job.goodput.lost`` splits it (detection / restart / recomputed), and per kind
    the medians. The faults are matched to the lost attempts in order (one fault ends one attempt)."""
    print("  each fault's cost (job.goodput.lost: detection / restart / recomputed s, steps repeated):")
    for loss in lost:
        print(f"    attempt {loss.attempt:>2} {loss.cause or '?':22} detection {loss.detection_s or 0:5.1f} s"
              f"  restart {loss.restart_s or 0:5.1f} s  recomputed {loss.recomputed_s:5.1f} s"
              f"  ({loss.steps_repeated} step(s) repeated)")  # fmt: skip
    if len(lost) != len(rows):
        print(f"  ({len(lost)} lost attempts for {len(rows)} faults: no split per kind)")
        return
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [x for r, x in zip(rows, lost, strict=True) if r["kind"] == kind]
        d = statistics.median(x.detection_s or 0.0 for x in mine)
        r_ = statistics.median(x.restart_s or 0.0 for x in mine)
        c = statistics.median(x.recomputed_s for x in mine)
        s = statistics.median(x.steps_repeated for x in mine)
        print(f"  {kind:15} p50 split: detection {d:.1f} s, restart {r_:.1f} s, recomputed {c:.1f} s"
              f" ({s:g} step(s) repeated)")  # fmt: skip


def run(nodes: NSNodes, root: Path, args: argparse.Namespace) -> None:
    ws = nodes.workspace("gp", root, nodes.addresses[:3])
    try:
        cluster = ws.create_cluster("c", vm_size="Standard_D2_v2", nodes=3, allow_fault_injection=True)
        wait(lambda: cluster.node_counts.idle == 3, 180, "three idle nodes")
        script = root / "stepper.py"
        script.write_text(STEPPER)
        out = root / "job"
        out.mkdir()
        total_steps = int(args.minutes * 60 / args.step_seconds)
        command = (
            f"{sys.executable} {script} {out} {total_steps} {args.step_seconds} {args.checkpoint_seconds}"
        )
        exp = ws.create_experiment("e")
        kinds = [k for k in args.kinds if args.head or k != "head_power_off"]
        job = exp.create_job("gp", cluster=cluster, node_count=2, command_line=command, max_retries=1000,
                             retry_on_exit_codes=[137]).submit()  # fmt: skip
        wait(lambda: bool(steps_of(job)) or job.state.ended, 300, "the first step")
        rows: list[dict[str, Any]] = []
        n = 0
        while not job.state.ended:
            time.sleep(args.fault_every)
            status = job.status
            if job.state.ended or status.state is not JobState.RUNNING or len(status.nodes) < 2:
                continue
            kind = kinds[n % len(kinds)]
            n += 1
            head = head_node(ws, nodes)
            target = nodes.by_address(status.nodes[-1]) if kind != "head_power_off" else head
            row = one_fault(job, kind, target, status.nodes[-1])
            row["head"] = target is head and kind != "head_power_off"  # the job's node held the lease too
            rows.append(row)
            said = (
                f"first resumed step {row['resume_s']:.1f} s later, {row['repeated']} step(s) repeated"
                if "resume_s" in row
                else f"not resumed (job {job.state.value})"
            )
            where = " (the head)" if target is head and kind != "head_power_off" else ""
            print(f"{kind:15} on {target.name}{where} at step {row['at_step']}: {said}", flush=True)
            if kind in ("power_off", "head_power_off"):
                target.power_on()
            elif kind == "partition":
                target.link_up()
        job.wait(timeout=60)
        g = job.goodput
        print(f"\njob {job.state.value}; {g.summary()}; {g.steps} steps, {g.steps_missing} lost")
        for kind in kinds:  # a worker's fault apart from the same fault of a worker that was the head too
            for on_head in (False, True):
                times = [float(r["resume_s"]) for r in rows
                         if r["kind"] == kind and r["head"] == on_head and "resume_s" in r]  # fmt: skip
                label = f"{kind} (the head)" if on_head else kind
                if times:
                    print(f"  {label:26} fault → first resumed step: p50 {statistics.median(times):.1f} s, "
                          f"p95 {percentile(times, 0.95):.1f} s ({len(times)} faults)")  # fmt: skip
        print_split(rows, g.lost)
        fresh = fresh_start_seconds(ws, script, root / "fresh", args.step_seconds)
        done_at = [int(r["at_step"]) for r in rows]
        redo = sum(done_at) * args.step_seconds + len(rows) * fresh
        productive = g.steps * args.step_seconds
        print(
            f"  by hand, from scratch (a new job's submit → first step {fresh:.1f} s, every step done so"
            f" far again): goodput {100 * productive / (productive + redo):.1f}% for the same faults"
        )
    finally:
        nodes.heal_all()
        ws.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="the job's length without faults")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--step-seconds", type=float, default=1.0)
    parser.add_argument("--checkpoint-seconds", type=float, default=30.0)
    parser.add_argument(
        "--no-head", dest="head", action="store_false", help="leave out the head node's power-off"
    )
    parser.add_argument(
        "--kinds", nargs="+", choices=KINDS, default=list(KINDS), help="the faults to take in turn (all)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-goodput-") as tmp:
        root = Path(tmp)
        try:
            with start_nodes(root / "nodes", root, 3) as nodes:
                run(nodes, root / "run", args)
        except NodesUnavailable as exc:
            print(f"namespace nodes are not available here: {exc}")
            return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
