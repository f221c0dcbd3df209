"""The cluster scheduler on real sshd nodes (127.0.0.2 head, 127.0.0.3): every queued job runs once and
no two jobs share a node; a name submitted by several processes at once runs once; nothing of a job is
left on any node after its reported end — whether its launcher or a rank's wrapper was killed or it was
terminated. A node lost mid-job (partitioned, powered off) is tested on nodes that are separate machines:
test_ssh_nsnodes.py.

The nodes are sshd servers on this machine, so every process of a job, on either "node", is visible in
this machine's /proc: found by the job's ``BATCHAI_JOB_TAG``, and as a descendant of a node's sshd.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import os
import shlex
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _labs import ssh_lab
from _procs import pid_alive, read_pid, wait_for
from batchai_sdk import AlreadyExistsError, JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from batchai_sdk.job import Job
from batchai_sdk.node.job import procs

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]

# What a rank records: its job, rank, the node the scheduler gave it (BATCHAI_RANK_NODES), the job's
# nodes, the sshd it really runs under (SSH_CONNECTION's server address), when it started and ended,
# and which of the jobs named in argv[3:] still had processes when it started (by their tags).
RECORDER = """
import json, os, sys, time
start = time.time()
out, secs = sys.argv[1], float(sys.argv[2])
busy = []
for tag in sys.argv[3:]:
    needle = ("BATCHAI_JOB_TAG=" + tag).encode()
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and needle in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0"):
                busy.append(tag)
                break
        except OSError:
            pass
time.sleep(secs)
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
record = {
    "job": os.environ["AZ_BATCHAI_JOB_NAME"],
    "rank": rank,
    "node": os.environ["BATCHAI_RANK_NODES"].split(",")[rank],
    "nodes": os.environ["BATCHAI_JOB_NODES"].split(","),
    "sshd": (os.environ.get("SSH_CONNECTION") or "? ? ?").split()[2],
    "start": start,
    "end": time.time(),
    "busy": busy,
}
with open(os.path.join(out, f"{record['job']}-{rank}.json"), "w") as f:
    f.write(json.dumps(record))
"""

# A rank that writes its pid where the test finds it, then sleeps until it is ended.
SLEEPER = """
import os, sys, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
with open(os.path.join(sys.argv[1], f"pid-{rank}"), "w") as f:
    f.write(str(os.getpid()))
print(f"rank {rank} up", flush=True)
time.sleep(300)
"""


def ppids() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def descendants(root: int, parents: dict[int, int] | None = None) -> list[int]:
    """``root``'s descendants in one look at /proc (or in ``parents``, that look taken already)."""
    parents = ppids() if parents is None else parents
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parents.items() if pp == pid]
        found.extend(children)
        frontier.extend(children)
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def is_node_agent(pid: int) -> bool:
    """The node's warm agent (``… batchai_node/__main__.py agent NAME``): the scheduler's, not a job's."""
    argv = cmdline(pid)
    return argv[3:4] == [b"agent"] and any(mark in argv[2] for mark in procs.OURS)


def scheduler_session(pid: int) -> bool:
    """The login shell of an SSH session the scheduler opens for itself — an agent's start (``exec …
    agent NAME``, before the exec) or a probe of the node (``true``) — whose user start-up (here
    ~/.bashrc's pyenv) may still run when a check looks: the scheduler's, not a job's."""
    argv = cmdline(pid)
    if argv[1:2] != [b"-c"] or len(argv) < 3:
        return False
    command = argv[2]
    return command == b"true" or (
        command.startswith(b"exec ") and b" agent " in command and any(mark in command for mark in procs.OURS)
    )


def agents_or_their_start(pid: int, sshd: int, parents: dict[int, int]) -> bool:
    """``pid`` is an agent, or a shell of the scheduler's own sessions (``scheduler_session``) or runs
    below one (its start-up files' commands) — not what an agent started: a job's commands under an
    agent are still the job's."""
    if is_node_agent(pid):
        return True
    while pid not in (sshd, 0, 1):
        if scheduler_session(pid):
            return True
        pid = parents.get(pid, 0)
    return False


def left_on_nodes(nodes: SSHNodes, addresses: list[str]) -> list[str]:
    """Processes that run under the nodes' sshd other than sshd's own session processes and the node
    agents the scheduler keeps there: what a job left (orted, ranks, their children) — the client's own
    connections run no lasting command."""
    left = []
    for address in addresses:
        node = nodes.nodes[address]
        assert node.process is not None
        parents = ppids()
        for pid in descendants(node.process.pid, parents):
            name = comm(pid)
            if (
                pid_alive(pid)
                and not name.startswith("sshd")
                and not agents_or_their_start(pid, node.process.pid, parents)
            ):
                left.append(f"{pid} {name} on {address}: {b' '.join(cmdline(pid))[:160]!r}")
    return left


def cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def tag_of(pid: int) -> str:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"BATCHAI_JOB_TAG="))


def parent(pid: int) -> int:
    return ppids()[pid]


def ended_at(job: Job) -> float:
    end = job.status.end_time
    assert end is not None
    return end.timestamp() if isinstance(end, datetime) else float(end)


lab = ssh_lab([HEAD, SECOND], "sched")


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster("c", vm_size="Standard_NC6", nodes=2)


@pytest.fixture(scope="module")
def exp(lab: Workspace) -> Experiment:
    return lab.create_experiment("e")


@pytest.fixture
def scripts(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


STARTED: list[Job] = []


@pytest.fixture(autouse=True)
def _nothing_left(ssh_nodes: SSHNodes, cluster: Cluster) -> Iterator[None]:
    yield
    while STARTED:  # a test that failed midway leaves no job running for the next one
        job = STARTED.pop()
        if not job.state.ended:
            job.terminate(timeout=60)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=60, what="the nodes to be free")
    # an orted (no job tag of its own: ssh started it) exits once its mpirun's connection is gone, a moment
    # after the job's tagged processes were ended; on a loaded machine that moment can be seconds
    with contextlib.suppress(AssertionError):  # the assert below names what is left
        wait_for(lambda: not left_on_nodes(ssh_nodes, [HEAD, SECOND]), timeout=10, what="nothing left")
    assert left_on_nodes(ssh_nodes, [HEAD, SECOND]) == []


def sleeper_job(
    exp: Experiment, cluster: Cluster, name: str, script: Path, out: Path
) -> tuple[Job, list[int]]:
    """A 2-node job whose ranks sleep; returns it once both ranks run, with their pids."""
    out.mkdir(exist_ok=True)
    job = exp.create_job(
        name,
        cluster=cluster,
        node_count=2,
        command_line=f"{shlex.quote(sys.executable)} {script} {out}",
    ).submit()
    STARTED.append(job)
    wait_for(
        lambda: len(list(out.glob("pid-*"))) == 2 or job.state.ended,
        timeout=60,
        what=f"both ranks of {name} to run",
    )
    assert not job.state.ended, job.status.failure_reason
    return job, [read_pid(out / f"pid-{r}") for r in (0, 1)]


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_queued_jobs_run_once_each_and_never_share_a_node(
    exp: Experiment, cluster: Cluster, scripts: Callable[[str, str], Path], tmp_path: Path, round_: int
) -> None:
    recorder = scripts("record.py", RECORDER)
    out = tmp_path / "runs"
    out.mkdir()
    names = [f"r{round_}q{i:02d}" for i in range(50)]
    sizes = {name: 2 if i % 4 == 0 else 1 for i, name in enumerate(names)}
    jobs = [
        exp.create_job(
            name,
            cluster=cluster,
            node_count=sizes[name],
            command_line=f"{shlex.quote(sys.executable)} {recorder} {out} 0.05",
        ).submit()
        for name in names
    ]
    for job in jobs:
        assert job.wait(timeout=240, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    # every job ran exactly once: one record per rank, as many ranks as nodes
    assert sorted((r["job"], r["rank"]) for r in runs) == sorted(
        (name, rank) for name in names for rank in range(sizes[name])
    )
    by_node: dict[str, list[tuple[float, float, str]]] = {}
    for run in runs:
        job = next(j for j in jobs if j.name == run["job"])
        assert sorted(run["nodes"]) == sorted(job.status.nodes), run  # the nodes its status reports
        assert len(set(run["nodes"])) == sizes[run["job"]]
        assert run["node"] in run["nodes"]
        assert run["sshd"] == run["node"], run  # the rank really ran on the node it was given
        by_node.setdefault(run["node"], []).append((run["start"], run["end"], run["job"]))
    assert set(by_node) == {HEAD, SECOND}
    for node, spans in by_node.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert end <= start, f"{a} and {b} overlapped on {node}"
    # first come, first served: no 1-node job submitted after a 2-node job started before it
    starts = {r["job"]: r["start"] for r in runs}
    for i, name in enumerate(names):
        if sizes[name] == 2:
            assert all(starts[later] >= starts[name] for later in names[i + 1 :]), name


def _submit_rounds(options: dict[str, Any], runs: str, rounds: int, barrier: Any, results: Any) -> None:
    ws = Workspace.ssh(**options)
    try:
        exp = ws.get_experiment("e")
        for _ in range(rounds):
            job = exp.create_job("same", cluster="c", command_line=f"echo ran >> {runs}")
            barrier.wait()
            try:
                job.submit()
                results.put("ok")
            except AlreadyExistsError:
                results.put("exists")
            except Exception as exc:  # the test shows what else happened
                results.put(f"{type(exc).__name__}: {exc}")
            barrier.wait()  # the parent checks the round and deletes the job
            barrier.wait()
    finally:
        ws.close()


def test_four_processes_submitting_one_name_run_it_once(
    lab: Workspace, exp: Experiment, cluster: Cluster, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    backend: Any = lab.backend
    options = {
        "name": "sched",
        "hosts": [HEAD, SECOND],
        "user": ssh_nodes.user,
        "key_file": str(ssh_nodes.key_file),
        "port": ssh_nodes.port,
        "share_path": backend.share_path,
        "state_dir": str(backend.state_dir),
        "node_state_dir": backend.node_state_dir,
        "authorized_keys_path": str(ssh_nodes.authorized_keys),
        "python": sys.executable,
        "tcp_interface": "lo",
        "connect_timeout": 5.0,
        "trust_on_first_use": True,
    }
    runs_file = tmp_path / "runs"
    rounds = 3
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(5)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_submit_rounds, args=(options, str(runs_file), rounds, barrier, results))
        for _ in range(4)
    ]
    for w in workers:
        w.start()
    done = False
    try:
        for _ in range(rounds):
            barrier.wait(timeout=120)  # all four submit now
            outcome = sorted(results.get(timeout=120) for _ in range(4))
            barrier.wait(timeout=60)
            assert outcome == ["exists", "exists", "exists", "ok"], outcome
            job = exp.get_job("same")
            assert job.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, job.status.failure_reason
            assert runs_file.read_text().splitlines() == ["ran"]
            job.delete()
            runs_file.unlink()
            barrier.wait(timeout=60)  # next round
        done = True
    finally:
        if not done:
            barrier.abort()  # releases the workers still waiting
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]


def test_a_killed_launcher_leaves_nothing_and_its_nodes_wait_until_empty(
    exp: Experiment,
    cluster: Cluster,
    ssh_nodes: SSHNodes,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, pids = sleeper_job(exp, cluster, "lost", scripts("sleep.py", SLEEPER), tmp_path / "lost")
    tag = tag_of(pids[0])
    # queued behind it: records whether anything of "lost" still ran when it started
    out = tmp_path / "runs"
    out.mkdir()
    follow = exp.create_job(
        "after_lost",
        cluster=cluster,
        node_count=2,
        command_line=f"{shlex.quote(sys.executable)} {scripts('record.py', RECORDER)} {out} 0 {tag}",
    ).submit()
    STARTED.append(follow)
    launcher = [p for p in procs.tagged_pids(tag) if cmdline(p)[3:4] == [b"launch"]]
    assert len(launcher) == 1
    os.kill(launcher[0], signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
    assert procs.tagged_pids(tag) == [], "a process of the job outlived its reported end"
    assert not any(pid_alive(p) for p in pids)
    assert "launcher was killed by signal 9" in (job.status.failure_reason or ""), job.status.failure_reason
    assert follow.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, follow.status.failure_reason
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len(runs) == 2 and all(r["busy"] == [] for r in runs), runs
    assert all(r["start"] >= ended_at(job) - 0.01 for r in runs)  # clocks of one machine


def test_a_killed_rank_wrapper_on_the_second_node_fails_the_job_and_leaves_nothing(
    exp: Experiment,
    cluster: Cluster,
    ssh_nodes: SSHNodes,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, pids = sleeper_job(exp, cluster, "shim", scripts("sleep.py", SLEEPER), tmp_path / "shim")
    tag = tag_of(pids[1])
    shim = parent(pids[1])  # rank 1's wrapper (the rank shim; /bin/sh -c between them), on the second node
    while cmdline(shim)[3:4] != [b"rank"]:
        shim = parent(shim)
        assert shim > 1, "no rank shim above the rank"
    second = ssh_nodes.nodes[SECOND].process
    assert second is not None and shim in descendants(second.pid)  # it really runs under that node's sshd
    os.kill(shim, signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
    assert procs.tagged_pids(tag) == [], "a process of the job outlived its reported end"
    assert not any(pid_alive(p) for p in pids)
    reason = job.status.failure_reason or ""
    assert f"rank 1 on node {SECOND}" in reason and "without reporting an exit" in reason, reason


def test_terminate_ends_every_process_of_the_job_on_both_nodes(
    exp: Experiment,
    cluster: Cluster,
    ssh_nodes: SSHNodes,
    scripts: Callable[[str, str], Path],
    tmp_path: Path,
) -> None:
    job, pids = sleeper_job(exp, cluster, "stopme", scripts("sleep.py", SLEEPER), tmp_path / "stop")
    tag = tag_of(pids[0])
    running = procs.tagged_pids(tag)
    assert len(running) >= 5  # launcher, mpirun, two shims, two ranks (and their shells)
    assert job.terminate(timeout=60) is JobState.TERMINATED
    assert procs.tagged_pids(tag) == [], "a process of the job outlived its reported end"
    assert not any(pid_alive(p) for p in [*pids, *running])
    assert cluster.node_counts == NodeCounts(idle=2)


def test_a_custom_toolkit_job_runs_on_the_node_it_was_given(
    exp: Experiment, cluster: Cluster, scripts: Callable[[str, str], Path], tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    recorder = scripts("record.py", RECORDER)
    holder = exp.create_job(
        "holder", cluster=cluster, command_line=f"{shlex.quote(sys.executable)} {recorder} {out} 3"
    ).submit()  # holds the head node
    STARTED.append(holder)
    wait_for(lambda: holder.state is JobState.RUNNING, what="the first job to start", timeout=60)
    custom = exp.create_job(
        "custom",
        cluster=cluster,
        toolkit="custom",
        command_line=f"OMPI_COMM_WORLD_RANK=0 {shlex.quote(sys.executable)} {recorder} {out} 0",
    ).submit()
    STARTED.append(custom)
    assert custom.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, custom.status.failure_reason
    assert holder.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED
    assert custom.status.nodes == (SECOND,)
    run = json.loads((out / "custom-0.json").read_text())
    assert run["sshd"] == SECOND, (
        f"given {SECOND}, ran under the sshd of {run['sshd']} while 'holder' held it"
    )
