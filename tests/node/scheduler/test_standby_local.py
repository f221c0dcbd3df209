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
    for name in standby.SSH_SETUP_FILES:
        (setup / name).write_text("Host *\n")
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


def test_a_node_that_lost_its_setup_gets_the_heads_back_and_can_take_over(tmp_path: Path) -> None:
    """The head hands its SSH setup to a node that booted afresh without it (over the standby's stdin, 0600
    in a 0700 folder, never on argv), so that node can take the cluster over again; a node that has its own
    setup keeps it."""
    share = tmp_path / "share"
    head_setup, node_setup = tmp_path / "head" / "clusters" / "c", tmp_path / "node" / "clusters" / "c"
    head_setup.mkdir(parents=True)
    files = {
        "ssh_config": "Host *\n    Port 22\n",
        "id_ed25519": "PRIVATE\n",
        "known_hosts": "n0 ssh-ed25519 A\n",
    }
    for name, text in files.items():
        (head_setup / name).write_text(text)
    head_cfg = dict(local_cluster_config(share, 3), ssh_command=["ssh", "-F", str(head_setup / "ssh_config")])
    handed = standby.ssh_setup(cast(ClusterConfig, head_cfg))
    assert handed == files
    node_cfg = dict(head_cfg, ssh_command=["ssh", "-F", str(node_setup / "ssh_config")])  # its own view
    assert not standby.can_lead(cast(ClusterConfig, node_cfg))
    state = tmp_path / "n1"
    state.mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-S", head_cfg["node_main"], "standby", str(state)],
        input=json.dumps({"cluster": node_cfg, "node": "n1", "setup": handed}).encode(),
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"ok": True}, done
    assert standby.can_lead(cast(ClusterConfig, node_cfg))
    for name, text in files.items():
        assert (node_setup / name).read_text() == text
        assert (node_setup / name).stat().st_mode & 0o777 == 0o600
    assert node_setup.stat().st_mode & 0o777 == 0o700
    assert "restored from its head" in (state / "standby.log").read_text()
    # a node with a setup of its own keeps it
    (node_setup / "id_ed25519").write_text("ITS OWN\n")
    assert not standby.restore_ssh_setup(cast(ClusterConfig, node_cfg), handed)
    assert (node_setup / "id_ed25519").read_text() == "ITS OWN\n"
    # anything else than those three files is refused, naming the field
    bad = subprocess.run(
        [sys.executable, "-S", head_cfg["node_main"], "standby", str(tmp_path / "n2")],
        input=json.dumps({"cluster": dict(node_cfg, ssh_command=["ssh", "-F", str(tmp_path / "x" / "ssh_config")]),
                          "node": "n2", "setup": {"../../etc/passwd": "x"}}).encode(),
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "setup" in json.loads(bad.stdout)["message"]
    assert not (tmp_path / "x").exists()
