"""The head's standbys (node/scheduler/standby.py): of two nodes that take a stale head lease over at the
same moment, exactly one wins and starts a scheduler; the other starts nothing. Run as real processes
racing on one cluster folder, released together."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from _configs import local_cluster_config
from _procs import wait_for
from batchai_sdk.node.protocol.cluster import ClusterConfig
from batchai_sdk.node.scheduler import head, standby


def _take(state_dir: str, cfg: dict[str, Any], me: str, seen: dict[str, Any], go: Any, out: Any) -> None:
    go.wait()
    out.put((me, standby.take_over(state_dir, cast(ClusterConfig, cfg), me, seen)))


def test_two_standbys_taking_the_lease_over_at_once_start_exactly_one_scheduler(tmp_path: Path) -> None:
    cfg = local_cluster_config(tmp_path / "share", 3)
    os.makedirs(cfg["cluster_dir"])
    ctx = multiprocessing.get_context("fork")
    for round_ in range(5):
        seen = {"node": "n0", "epoch": round_ * 10, "beat": "2026-01-01T00:00:00+00:00", "token": "t"}
        dirs = {me: tmp_path / f"{me}-{round_}" for me in ("n1", "n2")}
        for d in dirs.values():
            d.mkdir(mode=0o700)
        go, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_take, args=(str(d), cfg, me, seen, go, out)) for me, d in dirs.items()]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=30) for _ in procs)
        for p in procs:
            p.join(timeout=30)
        winners = [me for me, won in results.items() if won]
        assert len(winners) == 1, results
        claimed = json.loads(Path(head.claim_path(cfg["cluster_dir"], round_ * 10 + 1)).read_text())
        assert claimed["node"] == winners[0]
        # the winner's node started the scheduler (it exits idle at once here); the loser's started nothing
        started = dirs[winners[0]] / "scheduler.log"
        wait_for(started.exists, timeout=30, what="the scheduler's start")
        loser = next(me for me in dirs if me != winners[0])
        assert not (dirs[loser] / "scheduler.log").exists()
        assert not (dirs[loser] / "cluster.json").exists()
        taken = json.loads((dirs[winners[0]] / "cluster.json").read_text())
        assert taken["head"] == winners[0] and taken["down"] == ["n0"]


def test_the_successors_wait_in_the_clusters_order_after_the_head() -> None:
    cfg = cast(ClusterConfig, {"nodes": [{"id": f"n{i}"} for i in range(4)]})
    assert standby.wait_for(cfg, "n2", "n1") == standby.STALE_S
    assert standby.wait_for(cfg, "n3", "n1") == standby.STALE_S + standby.STAGGER_S
    assert standby.wait_for(cfg, "n0", "n1") == standby.STALE_S + 2 * standby.STAGGER_S  # wraps


def test_a_node_that_lost_its_setup_leaves_the_takeover_to_the_next_one(tmp_path: Path) -> None:
    """The first successor booted afresh (its node setup, the SSH configuration a head needs, went with its
    disk): it does not take the cluster over; the next node in the order does, one stagger later."""
    share = tmp_path / "share"
    base = local_cluster_config(share, 3)
    os.makedirs(base["cluster_dir"])
    lease = {"node": "n0", "host": "another-machine", "epoch": 1, "token": "t", "beat": "2026-01-01T00:00:00"}
    Path(base["cluster_dir"], head.HEAD_RECORD).write_text(json.dumps(lease))
    setup = tmp_path / "n2-setup"
    setup.mkdir()
    (setup / "ssh_config").write_text("Host *\n")
    procs = {}
    for me, config in (("n1", tmp_path / "n1-setup" / "ssh_config"), ("n2", setup / "ssh_config")):
        cfg = dict(base, ssh_command=["ssh", "-F", str(config)])  # each node's own view of its setup
        state = tmp_path / me
        state.mkdir(mode=0o700)
        procs[me] = (state, subprocess.Popen(
            [sys.executable, "-S", cfg["node_main"], "standby", str(state)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        ))  # fmt: skip
        procs[me][1].communicate(json.dumps({"cluster": cfg, "node": me}).encode(), timeout=30)
    claim = Path(head.claim_path(base["cluster_dir"], 2))
    wait_for(claim.exists, timeout=60, what="a takeover")
    assert json.loads(claim.read_text())["node"] == "n2"
    wait_for((tmp_path / "n2" / "scheduler.log").exists, timeout=30, what="the scheduler's start on n2")
    assert not (tmp_path / "n1" / "cluster.json").exists()
