"""Fixtures for the Slurm tests: a real slurmctld + slurmd + munged on this machine (see slurm_daemons.py)
and a Slurm workspace on a temporary share."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_daemons import Placement, SlurmCluster, skip_reason, start_cluster

from batchai_sdk import Workspace
from nsnodes import LOCK_DIR, NSNode, NSNodes


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with start_cluster() as cluster:
        saved = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)  # Slurm's commands (and the jobs) find this cluster
        try:
            yield cluster
        finally:
            if saved is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = saved


@pytest.fixture
def slurm_ws(slurm: SlurmCluster, tmp_path: Path) -> Iterator[Workspace]:
    """A workspace whose commands run here (this machine is the login node) on an empty share."""
    slurm.wait_idle()
    share = tmp_path / "share"
    share.mkdir()
    ws = Workspace.slurm(
        "slurmws",
        share_path=str(share),
        partition=slurm.partition,
        python=sys.executable,
        temp_root=str(tmp_path / "nodetmp"),
    )
    yield ws
    slurm.cancel_all()
    ws.close()


@pytest.fixture(scope="module")  # its slurmd would be leftovers for the SSH namespace tests
def ns_slurm(ns_nodes: NSNodes) -> Iterator[SlurmCluster]:
    """A Slurm on namespace nodes: slurmd on node1 and node2 (NodeAddr their addresses), slurmctld on
    node3, the login node; munged here (its socket is a file every node sees). Slurm's commands reach
    it with ``ns_slurm.env`` (SLURM_CONF), which this fixture leaves out of os.environ."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    compute, login = [ns_nodes["node1"], ns_nodes["node2"]], ns_nodes["node3"]

    def spawn(where: str | None, argv: list[str], options: dict[str, Any]) -> subprocess.Popen[bytes]:
        return (ns_nodes[where] if where else login).popen(argv, **options)

    placement = Placement(
        nodes={n.name: n.address for n in compute},
        ctld=(login.name, login.address),
        parent=LOCK_DIR,  # under /run: every node sees it (their /tmp is their own) and munge can enter it
        spawn=spawn,
        stop=NSNode.terminate,
    )
    with start_cluster(placement=placement) as cluster:
        yield cluster
