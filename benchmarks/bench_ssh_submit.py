"""Submit → running on a 2-node SSH cluster (sshd nodes on loopback), first job and second job.

Starts two real OpenSSH servers on 127.0.0.2 and 127.0.0.3 (as the SSH tests do; needs root and
openssh-server), opens ``Workspace.ssh`` on them with trust on first use, and submits small 2-node jobs
(mpirun over ssh runs a script that prints its rank). For each job it prints how long ``submit()`` took
and how long until the job's state left ``queued``. The first job of a cluster includes node setup (the
cluster key installed on both nodes); later jobs find it done and must not run it again — checked and
printed. Goal: submit → running under 3 s on 2 loopback nodes.

Then the queue over SSH: ``--queue`` jobs of ``--seconds`` each, one node each, all queued on the 2
nodes before any hand-off (the first two hold their nodes until every job is submitted: a submit over
SSH takes longer than a job here, and a node waiting for the next submit is no hand-off); each job
stamps its first and last instruction on the share. Printed beside the goals: the hand-off, a node freed
to the next job's first instruction there (goal < 0.3 s median), and the seconds per job beyond its own
run time — for the nodes' warm agents (node/agent/) and, in the same run, for the old path (SSH, a login
shell and a Python start per step: ``BATCHAI_NODE_AGENT=0`` in the workspace's env; ``--no-compare``
skips it), in ``--rounds`` alternating rounds each, then the median of all rounds per path. A third
path has the agents start mpirun's daemons too (``BATCHAI_NODE_AGENT_MPI=1``, opt-in; ``--no-agent-mpi``
skips it). A fourth runs the agents on 2 more sshd nodes whose sessions get a HOME with Debian's
default shell files (/etc/skel: a non-interactive shell reads nothing), as a node image has them:
mpirun's ssh to each node runs the user's ~/.bashrc, and this machine's (pyenv init) takes about
0.17 s per session (``--no-default-shell`` skips it). Timings are wall clock: on a loaded machine they
are noisy, read medians (the load average is printed with them).

    python benchmarks/bench_ssh_submit.py --queue 0    # a few seconds
    python benchmarks/bench_ssh_submit.py --queue 20   # about two minutes
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ssh"))

from sshd import NODE_ADDRESSES, sshd_available, start_nodes  # noqa: E402

from batchai_sdk._models import JobState  # noqa: E402

GOAL_S = 3.0
GOAL_HANDOFF_S = 0.3
STAMP = 's=$(date +%s.%N); sleep {secs}; e=$(date +%s.%N); echo "$s $e $BATCHAI_JOB_NODES" > {out}/{name}'
HOLD = "while [ ! -e {go} ]; do sleep 0.01; done; "  # the first jobs hold their nodes until all are queued
OLD_PATH = {"BATCHAI_NODE_AGENT": "0"}
AGENT_MPI = {"BATCHAI_NODE_AGENT_MPI": "1"}  # mpirun's daemons started by the agents too (opt-in)
SCRIPT = "import os\nprint('rank', os.environ.get('OMPI_COMM_WORLD_RANK'), flush=True)\n"


def setup_state(share: Path, cluster: str) -> dict[str, float]:
    root = share / ".batchai" / "clusters" / cluster / "setup"
    return {p.name: p.stat().st_mtime for p in root.iterdir()} if root.exists() else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="jobs to submit one after the other (>= 2)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds a job may take")
    parser.add_argument("--queue", type=int, default=20, help="1-node jobs queued at once (0: skip)")
    parser.add_argument("--seconds", type=float, default=0.5, help="run time of each queued job")
    parser.add_argument(
        "--no-compare", action="store_true", help="skip the queue on the old path (no node agents)"
    )
    parser.add_argument(
        "--no-agent-mpi",
        action="store_true",
        help="skip the queue with mpirun's daemons started by the agents (BATCHAI_NODE_AGENT_MPI=1)",
    )
    parser.add_argument(
        "--no-default-shell",
        action="store_true",
        help="skip the queue on nodes with Debian's default shell files (/etc/skel)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="queue rounds per path, alternating")
    args = parser.parse_args()
    if not sshd_available() or os.geteuid() != 0:
        print("needs root and OpenSSH's sshd (apt-get install openssh-server)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="bench_ssh_") as tmp:
        root = Path(tmp)
        share = root / "mnt" / "share"
        share.mkdir(parents=True)
        (root / "rank.py").write_text(SCRIPT)
        with start_nodes(root / "sshd", NODE_ADDRESSES[:2]) as nodes:
            t = time.perf_counter()
            ws = nodes.workspace("bench", root, nodes.addresses, share_path=str(share))
            print(f"Workspace.ssh (connect + first SFTP): {time.perf_counter() - t:.2f} s")
            with ws:
                exp = ws.create_experiment("bench")
                cluster = ws.create_cluster("c", nodes=2)
                submit_s: list[float] = []
                running_s: list[float] = []
                setup_after_first: dict[str, float] = {}
                failed = False
                for i in range(max(2, args.jobs)):
                    job = exp.create_job(
                        f"j{i}", cluster=cluster, node_count=2, python_script=str(root / "rank.py")
                    )
                    t0 = time.perf_counter()
                    job.submit()
                    t1 = time.perf_counter()
                    while job.state is JobState.QUEUED and time.perf_counter() - t0 < args.timeout:
                        time.sleep(0.01)
                    t2 = time.perf_counter()
                    state = job.wait(timeout=args.timeout, poll_interval=0.1)
                    submit_s.append(t1 - t0)
                    running_s.append(t2 - t0)
                    label = "first job (with node setup)" if i == 0 else f"job {i + 1} (no node setup)"
                    print(
                        f"{label:30s} submit() {t1 - t0:5.2f} s   submit → running {t2 - t0:5.2f} s   "
                        f"ended {state.value} after {time.perf_counter() - t0:5.2f} s"
                    )
                    if state is not JobState.SUCCEEDED:
                        print(job.tail("stderr.txt", 20), file=sys.stderr)
                        failed = True
                    if i == 0:
                        setup_after_first = setup_state(share, "c")
                    elif setup_state(share, "c") != setup_after_first:
                        print(f"job {i + 1} ran node setup again (setup files rewritten)", file=sys.stderr)
                        failed = True
                later = running_s[1:]
                print(
                    f"\nsubmit → running: first {running_s[0]:.2f} s, "
                    f"later median {statistics.median(later):.2f} s, max {max(later):.2f} s "
                    f"(goal < {GOAL_S:g} s); node setup ran once: {not failed and bool(setup_after_first)}"
                )
                if running_s[0] >= GOAL_S or max(later) >= GOAL_S:
                    print("goal missed", file=sys.stderr)
                    failed = True
            if args.queue:
                failed |= compare(nodes, root, (ws, cluster, share), args)
    return 1 if failed else 0


def compare(nodes: Any, root: Path, agents: tuple[Any, Any, Path], args: argparse.Namespace) -> bool:
    """The queue on the nodes' agents, on the old path and on nodes with a default shell, in
    alternating rounds (the machine's load drifts: each path meets it alike); True when a job failed."""
    paths = [("agents", *agents)]
    with contextlib.ExitStack() as opened:

        def add(label: str, name: str, on: Any, env: dict[str, str] | None = None) -> None:
            space_root = root / name
            (space_root / "mnt" / "share").mkdir(parents=True)
            space = opened.enter_context(on.workspace(name, space_root, on.addresses, env=env or {}))
            paths.append((label, space, space.create_cluster("c", nodes=2), space_root / "mnt" / "share"))

        if not args.no_compare:
            add("old path", "old", nodes, OLD_PATH)
        if not args.no_agent_mpi:
            add("agents, MPI daemons", "ampi", nodes, AGENT_MPI)
        if not args.no_default_shell:
            home = root / "home"
            shutil.copytree("/etc/skel", home)
            add("agents, default shell", "skel", opened.enter_context(
                start_nodes(root / "sshd_skel", NODE_ADDRESSES[2:4], home=home)
            ))  # fmt: skip
        gaps: dict[str, list[float]] = {label: [] for label, _, _, _ in paths}
        failed = False
        for r in range(args.rounds):
            for label, space, on, share in paths:
                exp = space.create_experiment(f"queue{r}")
                found = queue(exp, on, share / f"round{r}", args.queue, args.seconds, args.timeout, label)
                failed |= found is None
                gaps[label] += found or []
    for label, values in gaps.items():
        if values:
            print(
                f"all rounds, {label:21s}: hand-off median {statistics.median(values):.3f} s over "
                f"{len(values)} hand-offs (goal < {GOAL_HANDOFF_S:g} s)"
            )
    return failed


def queue(
    exp: Any, cluster: Any, share: Path, count: int, secs: float, timeout: float, label: str
) -> list[float] | None:
    """``count`` 1-node jobs queued on the 2 nodes; prints the hand-off and the time per job; returns the
    hand-offs, or None when a job failed."""
    out = share / "stamps"
    out.mkdir(parents=True)
    go = share / "go"
    jobs = [
        exp.create_job(
            f"q{i:03d}",
            cluster=cluster,
            command_line=(HOLD.format(go=go) if i < 2 else "") + STAMP.format(secs=secs, out=out, name=i),
        )
        for i in range(count)
    ]
    for job in jobs:
        job.submit()
    t0 = time.time()
    go.touch()
    states = [job.wait(timeout=timeout * count, poll_interval=0.2) for job in jobs]
    if any(s is not JobState.SUCCEEDED for s in states):
        print(f"queued jobs: {[s.value for s in states]}", file=sys.stderr)
        return None
    spans: dict[str, list[tuple[float, float]]] = {}
    last = t0
    for f in out.iterdir():
        start, end, node = f.read_text().split()
        spans.setdefault(node, []).append((float(start), float(end)))
        last = max(last, float(end))
    gaps = []
    for runs in spans.values():
        runs.sort()
        gaps += [b[0] - a[1] for a, b in itertools.pairwise(runs)]
    per_job = (last - t0) * 2 / count - secs  # 2 nodes: each node ran count/2 of them
    print(
        f"queue of {count} x {secs:g} s jobs on 2 SSH nodes, {label:21s}: hand-off median "
        f"{statistics.median(gaps):.3f} s, max {max(gaps):.3f} s (goal < {GOAL_HANDOFF_S:g} s); overhead "
        f"per job {per_job:.2f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return gaps


if __name__ == "__main__":
    sys.exit(main())
