"""A node that failed the join check is checked again with back-off and comes back once it passes
(docs/health.md): on namespace nodes, the second node is cut off when the cluster's scheduler first
checks its nodes; it is kept out, named; once its link is back the next check (30 s after the failure)
lets it in, and a job that needs both nodes runs, with no check run by hand."""

from __future__ import annotations

import time

import pytest
from nslab import STARTED

from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from nsnodes import NSNode, NSNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.nsnodes]

WORKSPACE = "joinback"


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    """A cluster with the join check on: its scheduler checks the nodes when the first job comes."""
    return lab.create_cluster(f"{lab.name}c", vm_size="Standard_NC6", nodes=2, health_check="basic")


def test_a_node_that_failed_the_join_check_comes_back_once_it_passes(
    ns_nodes: NSNodes, lab: Workspace, exp: Experiment, cluster: Cluster, second: NSNode
) -> None:
    # the second node answers, but cannot run the check: the share's files are hidden from it (a tmpfs
    # over them in its own mount namespace), as on a node whose share mount went stale
    meta = f"{lab.backend.share_path}/.batchai"  # type: ignore[attr-defined]
    hidden = second.run(f"mount -t tmpfs hidden {meta}")
    assert hidden.returncode == 0, hidden.stderr
    try:
        first = exp.create_job("first", cluster=cluster, command_line="hostname", toolkit="custom").submit()
        STARTED.append(first)
        wait_for(lambda: bool(cluster.failed_health()), timeout=120, what="the join check to fail a node")
        assert first.wait(timeout=120) is JobState.SUCCEEDED  # on the node that passed
        [(node, why)] = cluster.failed_health().items()
        assert node == second.address and "reachable" in why and why.endswith("FAIL"), why
        time.sleep(5)
        assert cluster.failed_health() == {node: why}  # kept out: no job gets it meanwhile
    finally:
        second.run(f"umount {meta}")
    mended = time.monotonic()
    wait_for(lambda: cluster.unusable_nodes() == {}, timeout=150, what=f"{node} to pass its next check")
    print(f"\n{node}: mended → let in again by its re-check in {time.monotonic() - mended:.0f} s")
    both = exp.create_job("both", cluster=cluster, node_count=2, command_line="hostname", toolkit="custom")
    STARTED.append(both.submit())
    assert both.wait(timeout=120) is JobState.SUCCEEDED
