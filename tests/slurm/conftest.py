"""Fixtures for the Slurm tests: a real slurmctld + slurmd + munged on this machine (see slurm_daemons.py)
and a Slurm workspace on a temporary share."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_daemons import SlurmCluster, skip_reason, start_cluster

from batchai_sdk import Workspace


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
