"""The head lease is beaten from a thread of the scheduler's own (node/scheduler/head.py): a loop pass that
waits on a node for longer than a standby's patience must not read as a lost head node, while a loop that
stopped coming round must; and once another node claimed the lease, the old head knows it for good."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

from _configs import local_cluster_config
from _procs import wait_for
from batchai_sdk.node.protocol.cluster import ClusterConfig
from batchai_sdk.node.scheduler import head, standby


def _lease(tmp_path: Path) -> head.HeadLease:
    cfg = dict(local_cluster_config(tmp_path / "share", 3))
    cfg.update(head="n0", ssh_command=["ssh"])
    Path(cfg["cluster_dir"]).mkdir(parents=True)
    lease = head.HeadLease(cast(ClusterConfig, cfg))
    lease.take()
    return lease


def _beat(lease: head.HeadLease) -> str:
    assert lease.path is not None
    return str(json.loads(Path(lease.path).read_text())["beat"])


def test_the_lease_is_beaten_while_a_loop_pass_waits_longer_than_a_standbys_patience(tmp_path: Path) -> None:
    lease = _lease(tmp_path)
    ticked = time.monotonic()  # the loop came round once, then waits on something
    lease.beat_in_background(lambda: ticked, stall_s=standby.STALE_S + 3)
    try:
        beats = {_beat(lease)}
        began = time.monotonic()
        while time.monotonic() - began < standby.STALE_S + 1:  # no call into the lease from the "loop"
            time.sleep(0.5)
            beats.add(_beat(lease))
        # a standby sees the beat change at least every BEAT_S, never standing still for STALE_S
        assert len(beats) >= (standby.STALE_S + 1) / head.BEAT_S - 1
        # the loop stuck past its bound: the beat stands still, so a standby takes the cluster over
        wait_for(lambda: time.monotonic() - ticked > standby.STALE_S + 3, timeout=30, what="the bound")
        time.sleep(head.BEAT_S * 2)
        still = _beat(lease)
        time.sleep(head.BEAT_S * 2)
        assert _beat(lease) == still
    finally:
        lease.stop()


def test_a_head_whose_lease_was_claimed_steps_down_even_when_its_beat_looked_first(tmp_path: Path) -> None:
    lease = _lease(tmp_path)
    lease.beat_in_background(time.monotonic)
    try:
        assert lease.cluster_dir is not None
        assert head.claim(lease.cluster_dir, lease.epoch + 1, "n1")  # another node takes the cluster over
        time.sleep(head.BEAT_S + head.CHECK_S)  # the beating thread looks at the claim first
        taken = [lease.taken_over() for _ in range(3)]
        assert all(t is not None for t in taken)  # the loop sees it too, every time it asks
        before = Path(str(lease.path)).read_text()
        time.sleep(head.BEAT_S * 2)
        assert Path(str(lease.path)).read_text() == before  # and nothing beats over the new head's lease
    finally:
        lease.stop()
