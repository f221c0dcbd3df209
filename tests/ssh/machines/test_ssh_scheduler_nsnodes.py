"""The cluster scheduler's reliability on nodes that are separate machines (tests/nsnodes.py): the
queue's integrity, kill -9 of a job's launcher and of a rank's wrapper on the second node, an
eviction of the second node — the checks of test_ssh_scheduler.py where separate nodes change what is
tested.

On loopback nodes a rank's "node" is only the sshd it runs under, and "nothing of the job is left"
is one look at this machine's /proc. Here a rank proves its node by its hostname, a job that still
runs is seen only on its own node (the recorder looks in its node's /proc), and what a job left is
looked for in each node's own /proc.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from nslab import STARTED, sleeper_job
from test_ssh_scheduler import RECORDER

from batchai_sdk import JobState
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

# RECORDER, which also says its node's hostname
HOSTNAMED = RECORDER.replace('"busy": busy,', '"busy": busy, "host": __import__("socket").gethostname(),')

WORKSPACE = "nssched"


def test_queued_jobs_run_once_each_on_the_node_given_and_never_share_one(
    ns_nodes: NSNodes, exp: Experiment, cluster: Cluster, script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    recorder = script("record.py", HOSTNAMED)
    out = tmp_path / "runs"
    out.mkdir()
    names = [f"q{i:02d}" for i in range(12)]  # the loopback module runs 3 x 50
    sizes = {name: 2 if i % 4 == 0 else 1 for i, name in enumerate(names)}
    jobs = [
        exp.create_job(
            name, cluster=cluster, node_count=sizes[name],
            command_line=f"{shlex.quote(sys.executable)} {recorder} {out} 0.05",
        ).submit()
        for name in names
    ]  # fmt: skip
    STARTED.extend(jobs)
    for job in jobs:
        assert job.wait(timeout=240, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert sorted((r["job"], r["rank"]) for r in runs) == sorted(
        (name, rank) for name in names for rank in range(sizes[name])
    )
    by_node: dict[str, list[tuple[float, float, str]]] = {}
    for run in runs:
        # the machine it ran on is the node the scheduler gave it: by its address and its hostname
        assert run["sshd"] == run["node"], run
        assert ns_nodes.by_address(run["node"]).name == run["host"], run
        by_node.setdefault(run["node"], []).append((run["start"], run["end"], run["job"]))
    assert len(by_node) == 2
    for node, spans in by_node.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert end <= start, f"{a} and {b} overlapped on {node}"


def test_a_killed_launcher_leaves_nothing_on_either_node_before_the_next_job_starts(
    ns_nodes: NSNodes, exp: Experiment, cluster: Cluster, script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    head, second = ns_nodes["node1"], ns_nodes["node2"]
    job, ranks = sleeper_job(exp, cluster, "lost", tmp_path / "lost")
    tag = str(ranks[0]["tag"])
    out = tmp_path / "runs"
    out.mkdir()
    follow = exp.create_job(
        "after_lost", cluster=cluster, node_count=2,
        command_line=f"{shlex.quote(sys.executable)} {script('record.py', HOSTNAMED)} {out} 0 {tag}",
    ).submit()  # fmt: skip
    STARTED.append(follow)
    launcher = [pid for pid, cmd in head.tagged(tag).items() if cmd.split()[3:4] == ["launch"]]
    assert len(launcher) == 1, head.tagged(tag)
    os.kill(head.host_pid(launcher[0]), signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
    assert "launcher was killed by signal 9" in (job.status.failure_reason or ""), job.status.failure_reason
    assert head.tagged(tag) == {} and second.tagged(tag) == {}, "a process of the job outlived its end"
    assert follow.wait(timeout=60, poll_interval=0.1) is JobState.SUCCEEDED, follow.status.failure_reason
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    # each rank of the next job looked in its own node's /proc: nothing of "lost" ran there
    assert sorted(r["host"] for r in runs) == ["node1", "node2"]
    assert all(r["busy"] == [] for r in runs), runs


def test_a_killed_rank_wrapper_on_the_second_node_fails_the_job_and_leaves_nothing(
    ns_nodes: NSNodes, exp: Experiment, cluster: Cluster, script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    head, second = ns_nodes["node1"], ns_nodes["node2"]
    job, ranks = sleeper_job(exp, cluster, "shim", tmp_path / "shim")
    assert ranks[1]["host"] == "node2"
    tag = str(ranks[1]["tag"])
    shim = int(str(ranks[1]["pid"]))  # found in node2's /proc, numbered as node2 numbers it
    while (second.proc / str(shim) / "cmdline").read_bytes().split(b"\0")[3:4] != [b"rank"]:
        shim = second.parent(shim)
        assert shim > 1, "no rank shim above the rank"
    os.kill(second.host_pid(shim), signal.SIGKILL)
    assert job.wait(timeout=60, poll_interval=0.1) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert f"rank 1 on node {second.address}" in reason and "without reporting an exit" in reason, reason
    assert head.tagged(tag) == {} and second.tagged(tag) == {}, "a process of the job outlived its end"


def test_an_evicted_second_node_checkpoints_there_and_the_job_runs_again(
    ns_nodes: NSNodes, exp: Experiment, cluster: Cluster, script: Callable[[str, str], Path], tmp_path: Path
) -> None:
    second: NSNode = ns_nodes["node2"]
    job, ranks = sleeper_job(exp, cluster, "evicted", tmp_path / "ev")
    assert cluster.simulate_eviction(second.address, grace_seconds=10) == "e/evicted"
    assert job.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, job.status.failure_reason
    first = job.attempts[0]
    assert first["cause"] == "evicted" and first["extra"]["evictions"][0]["node"] == second.address, first
    assert "rank 1 checkpointed on node2" in job.tail("attempt-1/stdout.txt", 10)
    assert sorted(job.tail("stdout.txt")) == ["rank 0 back on node1", "rank 1 back on node2"]
    assert second.tagged(str(ranks[1]["tag"])) == {}
