"""The head node's loss on a 3-node cluster of namespace nodes (tests/nsnodes.py): the head node (where the
cluster's scheduler runs, with its database on the head's own disk) is powered off while a 2-node job
trains; another node takes the scheduler over, the job is requeued from its checkpoint and resumes on the
nodes left. The old head, powered on again, is taken back by the new scheduler by itself (no client call),
so when a worker is lost next the job goes on there; it succeeds with one metrics series.

With no client anywhere (a user who submitted and closed the laptop), the other nodes' standbys
(node/scheduler/standby.py) take the head lease over by themselves: the unattended test does not read the
job at all while the head is off (no state, no wait: nothing that could revive a scheduler), and when it
reads again the job has resumed from its checkpoint on the nodes left, under exactly one new scheduler."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from batchai_sdk.job import Job
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

WORKSPACE = "nshead"

# rank 0 logs a step every STEP_S (to the job's metrics and, with its time, to steps.txt, which the
# unattended test reads as a plain file: no SDK call while the head is off) and checkpoints every 5 steps
# (atomically, on the share); a later attempt resumes after the checkpoint's step
STEPPER = """\
import json, os, sys, time
from batchai_sdk import log_metric
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
folder, steps, step_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ckpt = os.path.join(folder, "ckpt.json")
done = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        done = json.load(f)["step"]
for step in range(done + 1, steps + 1):
    time.sleep(step_s)
    if rank == 0:
        log_metric(step, loss=1.0 / step)
        with open(os.path.join(folder, "steps.txt"), "a") as f:
            f.write(f"{step} {time.time()}\\n")
        if step % 5 == 0:
            with open(ckpt + ".tmp", "w") as f:
                json.dump({"step": step}, f)
            os.replace(ckpt + ".tmp", ckpt)
"""
STEPS, STEP_S = 90, 0.5


def runs(node: NSNode, mode: str) -> bool:
    """Whether the node runs the node code in ``mode`` (``__main__.py MODE ...``)."""
    return any(argv[3:4] == [mode] for argv in node.argvs().values())


def steps_logged(out: Path) -> list[tuple[int, float]]:
    path = out / "steps.txt"
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(int(r[0]), float(r[1])) for r in rows if len(r) == 2]


@pytest.fixture(scope="module")
def lab(ns_nodes: NSNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    ws = ns_nodes.workspace(WORKSPACE, tmp_path_factory.mktemp(WORKSPACE), ns_nodes.addresses[:3])
    yield ws
    ns_nodes.heal_all()
    ws.close()


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster(f"{lab.name}c", vm_size="Standard_D2_v2", nodes=3)


@pytest.fixture(autouse=True)
def mended(ns_nodes: NSNodes, cluster: Cluster) -> Iterator[None]:
    """After each test: every node on and linked, the three nodes idle (the head node back too)."""
    yield
    ns_nodes.heal_all()
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="the nodes to be free")


def checkpointed_job(exp: Experiment, cluster: Cluster, name: str, tmp_path: Path) -> tuple[Job, Path]:
    """The stepper as a 2-node job on the three idle nodes, once it is past its second checkpoint; and the
    folder where it checkpoints and logs its steps."""
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    out = tmp_path / "out"
    out.mkdir()
    job = exp.create_job(
        name, cluster=cluster, node_count=2, max_retries=3,
        command_line=f"{sys.executable} {script} {out} {STEPS} {STEP_S}",
    ).submit()  # fmt: skip
    ckpt = out / "ckpt.json"
    wait_for(lambda: (ckpt.exists() and json.loads(ckpt.read_text())["step"] >= 10) or job.state.ended,
             timeout=180, what="the job's second checkpoint")  # fmt: skip
    assert job.state is JobState.RUNNING, job.status.failure_reason
    return job, out


def test_the_head_nodes_power_off_requeues_the_job_from_its_checkpoint_on_the_nodes_left(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    job, out = checkpointed_job(lab.create_experiment("e"), cluster, "headloss", tmp_path)
    ckpt = out / "ckpt.json"
    head = ns_nodes["node1"]  # the first host: the cluster's head node, where its scheduler runs
    assert runs(head, "scheduler"), "the scheduler is not on node1"
    off = time.time()
    head.power_off()
    saved = json.loads(ckpt.read_text())["step"]  # rank 0 may have died with the head: nothing after this
    resumed: list[float] = []

    def first_resumed_step() -> bool:
        steps = [(s, t) for s, t in job._step_records() if t > off]
        if steps:
            resumed.append(min(steps, key=lambda r: r[1])[1] - off)
            first = min(steps, key=lambda r: r[1])[0]
            assert first <= saved + 1, f"the job resumed at step {first}, past its checkpoint ({saved})"
        return bool(steps) or job.state.ended

    wait_for(first_resumed_step, timeout=120, what="the first step after the head node's loss")
    head.power_on()  # it booted afresh: the new scheduler takes it back once it answers
    # a node of the job that does not run the new scheduler
    worker = next(
        ns_nodes.by_address(n) for n in job.status.nodes if not runs(ns_nodes.by_address(n), "scheduler")
    )
    assert worker is not head
    worker.power_off()  # only the old head can take the lost worker's place
    assert job.wait(timeout=240, poll_interval=0.5) is JobState.SUCCEEDED, job.status.failure_reason
    assert head.address in job.attempts[-1]["nodes"], job.attempts
    lost = job.attempts[0]  # the attempt the head node's loss ended; the last one succeeded
    assert lost["cause"] == "node_lost" and "database was lost" in lost["reason"], lost
    assert head.address not in job.attempts[1]["nodes"], job.attempts  # resumed on the nodes left
    steps = sorted(s for s, _ in job._step_records())
    assert set(steps) == set(range(1, STEPS + 1)), steps  # no step lost
    metrics = job.metrics()
    rows = metrics.to_dict("records") if hasattr(metrics, "to_dict") else metrics
    assert sorted(int(r["step"]) for r in rows) == list(range(1, STEPS + 1))  # one series, a point a step
    print(f"\nhead node power-off → first resumed step {resumed[0]:.1f} s (checkpoint at step {saved})")
    assert resumed[0] <= 60, f"the job resumed {resumed[0]:.0f} s after the head node's loss"


def test_a_head_node_cut_off_is_taken_over_and_steps_down_once_back(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    """Cut off, the head node's scheduler runs on and still writes the share (bound on every node here),
    so its records beat: the job waits for the nodes it cannot reach (``nodes_down``), and a client that
    cannot reach the head node either takes the cluster over. Back, the old scheduler finds its lease taken
    and steps down."""
    exp = lab.create_experiment("e", exist_ok=True)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=3), timeout=120, what="three idle nodes")
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    out = tmp_path / "out"
    out.mkdir()
    job = exp.create_job(
        "cutoff", cluster=cluster, node_count=2, max_retries=3,
        command_line=f"{sys.executable} {script} {out} {STEPS} {STEP_S}",
    ).submit()  # fmt: skip
    ckpt = out / "ckpt.json"
    wait_for(lambda: ckpt.exists() or job.state.ended, timeout=180, what="the job's first checkpoint")
    assert job.state is JobState.RUNNING, job.status.failure_reason
    head = next(n for n in ns_nodes.nodes.values() if runs(n, "scheduler"))
    head.partition()  # its scheduler runs on, cut off from the others and from this client
    off = time.monotonic()
    # the job needs 2 nodes and the cut-off head reaches none but itself: only another scheduler can end it
    assert job.wait(timeout=240, poll_interval=0.5) is JobState.SUCCEEDED, job.status.failure_reason
    print(
        f"\nhead node cut off → the job done under another node's scheduler {time.monotonic() - off:.1f} s later"
    )
    head.heal()
    # back, the cut-off scheduler finds the head lease taken and steps down
    try:
        wait_for(
            lambda: not runs(head, "scheduler"), timeout=30, what="the cut-off head's scheduler to step down"
        )
    except AssertionError:
        print(head.run("tail -n 40 /tmp/batchai-node/tmp/scheduler/*/scheduler.log").stdout)
        raise
    steps = [s for s, _ in job._step_records()]
    assert set(steps) == set(range(1, STEPS + 1)), steps  # no step lost
    # (not "each step once": here the cut-off head still writes the share, where a real partition mostly
    # cuts that too, so its scheduler and its rank run on until its own lost-node watch ends the attempt)


def test_the_nodes_take_the_lost_heads_scheduler_over_with_no_client_and_the_job_resumes(
    ns_nodes: NSNodes, lab: Workspace, cluster: Cluster, tmp_path: Path
) -> None:
    job, out = checkpointed_job(lab.create_experiment("unattended"), cluster, "unattended", tmp_path)
    ckpt = out / "ckpt.json"
    head, others = ns_nodes["node1"], [ns_nodes["node2"], ns_nodes["node3"]]
    assert runs(head, "scheduler"), "the scheduler is not on node1"
    wait_for(
        lambda: all(runs(n, "standby-watch") for n in others), timeout=60, what="a standby on each other node"
    )
    # from here until the job resumed, this client reads plain files only: nothing of the SDK runs
    off = time.time()
    head.power_off()
    saved = json.loads(ckpt.read_text())["step"]  # rank 0 may have died with the head: nothing after this
    wait_for(lambda: any(t > off for _, t in steps_logged(out)), timeout=120,
             what="a step after the head node's loss, with no client")  # fmt: skip
    first, at = min(((s, t) for s, t in steps_logged(out) if t > off), key=lambda r: r[1])
    print(f"\nhead node power-off → first resumed step {at - off:.1f} s with no client (checkpoint {saved})")
    # now the client reads: one new scheduler, the job resumed from its checkpoint on the nodes left
    assert [runs(n, "scheduler") for n in others].count(True) == 1, "not exactly one scheduler took over"
    assert first <= saved + 1, f"the job resumed at step {first}, past its checkpoint ({saved})"
    assert job.state is JobState.RUNNING, job.status.failure_reason
    assert head.address not in job.status.nodes, job.status.nodes
    head.power_on()
    assert job.wait(timeout=240, poll_interval=0.5) is JobState.SUCCEEDED, job.status.failure_reason
    lost = job.attempts[0]
    assert lost["cause"] == "node_lost", lost
    assert {s for s, _ in job._step_records()} == set(range(1, STEPS + 1))  # no step lost
    assert at - off <= 60, f"the job resumed {at - off:.0f} s after the head node's loss"
