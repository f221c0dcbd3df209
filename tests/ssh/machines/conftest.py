"""Fixtures of the SSH tests on namespace nodes (tests/nsnodes.py): a 2-node cluster on node1 and node2
per module (the module's ``WORKSPACE`` names it: the nodes keep each cluster's files in their own /tmp
by workspace and cluster), mended after each test."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from nslab import STARTED

from _labs import ssh_lab
from _procs import wait_for
from batchai_sdk import Workspace
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from nsnodes import NSNode, NSNodes

lab = ssh_lab(2, nodes="ns_nodes")  # named after the module's WORKSPACE


@pytest.fixture(scope="module")
def cluster(lab: Workspace) -> Cluster:
    return lab.create_cluster(f"{lab.name}c", vm_size="Standard_NC6", nodes=2)


@pytest.fixture(scope="module")
def exp(lab: Workspace) -> Experiment:
    return lab.create_experiment("e")


@pytest.fixture
def head(ns_nodes: NSNodes) -> NSNode:
    return ns_nodes["node1"]


@pytest.fixture
def second(ns_nodes: NSNodes) -> NSNode:
    return ns_nodes["node2"]


@pytest.fixture(autouse=True)
def mended(ns_nodes: NSNodes, cluster: Cluster) -> Iterator[None]:
    """After each test: every node on and linked, no job running, both nodes idle and empty."""
    yield
    ns_nodes.heal_all()
    while STARTED:
        job = STARTED.pop()
        if not job.state.ended:
            job.terminate(timeout=120)
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=120, what="the nodes to be free")
    for name in ("node1", "node2"):
        # MPI's daemon (orted) carries no job tag: it leaves when mpirun's connection closes, a moment
        # after a killed launcher's job ended; anything of the job still there after that is a leftover
        with contextlib.suppress(AssertionError):
            wait_for(lambda n=name: not ns_nodes[n].leftovers(), timeout=15, what=f"{name} to be empty")
        assert ns_nodes[name].leftovers() == [], name
