"""Autoscale over SSH with the submitting process gone: a cluster of two sshd nodes (127.0.0.2 head,
127.0.0.3) with ``min_nodes=0, max_nodes=2`` and a 5 s idle limit grows for a queued 2-node job, runs it,
keeps the node of a long 1-node job while the other node goes idle past the limit, and shrinks to 0 by
itself. The jobs are submitted by a process that exits; everything after is seen from a fresh Workspace
object, through the records the cluster's scheduler publishes (size, events, node assignments).

It also measures how late a node goes: seconds from the moment its idle limit was reached (the end of
its last job + the limit) to the scheduler's decision that released it (docs/cost.md quotes the figure).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import JobState, Workspace
from batchai_sdk.cluster import Cluster

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]
IDLE_LIMIT = 5.0

# The submitting process: its own Workspace.ssh on the same nodes, two jobs queued at once, then it exits.
SUBMIT = """
import sys
from batchai_sdk import Workspace
ws = Workspace.ssh({name!r}, hosts={hosts!r}, **{options!r})
exp = ws.create_experiment("e", exist_ok=True)
exp.create_job("wide", cluster="auto", node_count=2, command_line="sleep 2").submit()
exp.create_job("long", cluster="auto", node_count=1, command_line="sleep {long_s}").submit()
ws.close()
"""


def open_workspace(ssh_nodes: SSHNodes, root: Path) -> tuple[Workspace, dict[str, object]]:
    """A fresh ``Workspace.ssh`` on the first two nodes, and the options that open the same one again."""
    options: dict[str, object] = {
        "user": ssh_nodes.user,
        "key_file": str(ssh_nodes.key_file),
        "port": ssh_nodes.port,
        "trust_on_first_use": True,
        "authorized_keys_path": str(ssh_nodes.authorized_keys),
        "share_path": str(root / "mnt" / "share"),
        "state_dir": str(root / "client_state"),
        "node_state_dir": str(root / "node_state"),
        "python": sys.executable,
        "tcp_interface": "lo",
        "connect_timeout": 5.0,
    }
    (root / "mnt" / "share").mkdir(parents=True, exist_ok=True)
    return Workspace.ssh("auto", hosts=[HEAD, SECOND], **options), options  # type: ignore[arg-type]


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def wait_for(what: str, check: object, cluster: Cluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: {cluster.events()}"
        time.sleep(0.2)


def test_ssh_cluster_grows_keeps_a_busy_node_and_scales_to_zero_with_the_client_gone(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    ws, options = open_workspace(ssh_nodes, tmp_path)
    with ws:
        ws.create_cluster(
            "auto",
            vm_size="Standard_NC4as_T4_v3",
            min_nodes=0,
            max_nodes=2,
            idle_seconds_before_scaledown=IDLE_LIMIT,
        )
    long_s = 25  # long enough to be running well after the other node went
    client = textwrap.dedent(SUBMIT).format(name="auto", hosts=[HEAD, SECOND], options=options, long_s=long_s)
    subprocess.run([sys.executable, "-c", client], check=True, timeout=180)  # submits, then exits

    fresh, _ = open_workspace(ssh_nodes, tmp_path)  # nothing of the submitting process is left
    with fresh:
        cluster = fresh.get_cluster("auto")
        exp = fresh.get_experiment("e")
        wide, long = exp.get_job("wide"), exp.get_job("long")
        assert wide.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, wide.tail("stderr.txt")
        assert sorted(wide.status.nodes or []) == [HEAD, SECOND]

        # while the long job runs, the other node goes once idle past the limit; the long job's stays
        wait_for("a shrink to 1", lambda: cluster.target_nodes == 1, cluster, 60)
        assert long.state is JobState.RUNNING
        held = list(long.status.nodes)
        assert len(held) == 1
        shrink = cluster.events()[-1]
        assert shrink["from"] == 2 and shrink["to"] == 1, shrink
        assert shrink["remove"] and held[0] not in shrink["remove"], (held, shrink)
        assert f"idle past {IDLE_LIMIT:g}s" in shrink["reason"], shrink
        node_states = {n: s.value for n, s in cluster.node_states().items()}
        assert node_states == {held[0]: "running"}, node_states
        assert cluster.node_counts.running == 1 and cluster.node_counts.idle == 0
        assert scheduler_pids(tmp_path), "the cluster's scheduler runs on its head node"

        assert long.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, long.tail("stderr.txt")
        wait_for("a shrink to 0", lambda: cluster.target_nodes == 0, cluster, 60)
        events = cluster.events()
        scaling = [e for e in events if "from" in e]
        assert [(e["from"], e["to"]) for e in scaling] == [(0, 2), (2, 1), (1, 0)], events
        assert "queued" in scaling[0]["reason"]
        last = scaling[-1]
        assert last["remove"] == held and f"idle past {IDLE_LIMIT:g}s" in last["reason"], last

        assert cluster.nodes_up == 0  # costs nothing, and says since when nothing ran
        since = cluster.idle_since
        assert since is not None and abs((since - long.status.end_time).total_seconds()) < 1  # type: ignore[operator]
        assert (cluster.idle_seconds or 0) >= IDLE_LIMIT

        # how late each node went: from its idle limit (its last job's end + the limit) to its release
        ends = [job.status.end_time for job in (wide, long)]
        assert ends[0] is not None and ends[1] is not None
        late = [
            when(shrink["time"]) - (ends[0].timestamp() + IDLE_LIMIT),
            when(last["time"]) - (ends[1].timestamp() + IDLE_LIMIT),
        ]
        print(
            f"\nSSH autoscale: nodes released {late[0]:.2f} s and {late[1]:.2f} s "
            f"after their {IDLE_LIMIT:g} s idle limit"
        )
        assert all(0 <= x < 10 for x in late), late  # never early; late by a loop of the scheduler or so

    deadline = time.monotonic() + 30  # at min_nodes with nothing queued, the scheduler itself exits
    while scheduler_pids(tmp_path):
        assert time.monotonic() < deadline, "the scheduler should exit once the cluster is at 0 nodes"
        time.sleep(0.2)


def scheduler_pids(root: Path) -> list[int]:
    """The cluster scheduler processes started for this test's nodes (found by their state folder)."""
    needle = str(root / "node_state").encode()
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"scheduler" in cmdline and needle in cmdline:
            out.append(int(proc.name))
    return out
