"""Opt-in: the Azure Batch engine on a real subscription. Costs money; always deletes what it made.

    BATCHAI_LIVE_AZURE_BATCH=1 AZURE_SUBSCRIPTION_ID=<id> pytest -m azure_live tests/azure/test_azure_batch_live.py

Credentials come from DefaultAzureCredential. Optional: BATCHAI_LIVE_LOCATION (eastus),
BATCHAI_LIVE_BATCH_VM_SIZE (Standard_D2s_v5: the new Batch account needs core quota for its family).
The test makes its own resource group ``batchai-live-<random>`` (Batch account, storage, share, a pool of
two nodes) and deletes it in ``finally``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchai_sdk import Workspace
from batchai_sdk._models import JobState

pytestmark = [
    pytest.mark.azure_live,
    pytest.mark.skipif(
        os.environ.get("BATCHAI_LIVE_AZURE_BATCH") != "1" or not os.environ.get("AZURE_SUBSCRIPTION_ID"),
        reason="live Azure Batch tests are opt-in: BATCHAI_LIVE_AZURE_BATCH=1 and AZURE_SUBSCRIPTION_ID",
    ),
    pytest.mark.timeout(3 * 3600),
]


@pytest.fixture
def live_ws(tmp_path: Path) -> Iterator[Workspace]:
    ws = Workspace.azure(
        "batchailive",
        engine="batch",
        resource_group=f"batchai-live-{secrets.token_hex(4)}",
        location=os.environ.get("BATCHAI_LIVE_LOCATION", "eastus"),
        state_dir=tmp_path / "state",
    )
    try:
        yield ws
    finally:
        ws.delete(force=True)  # the resource group this test created, and everything in it


def test_live_two_node_mpi_job_on_a_batch_pool(live_ws: Workspace) -> None:
    size = os.environ.get("BATCHAI_LIVE_BATCH_VM_SIZE", "Standard_D2s_v5")
    cluster = live_ws.create_cluster("live", vm_size=size, nodes=2, idle_seconds_before_scaledown=None)
    cluster.wait_until_steady(timeout=3600)
    assert cluster.node_counts.idle == 2, cluster.node_counts
    exp = live_ws.create_experiment("live")
    job = exp.create_job(
        "hello",
        cluster=cluster,
        node_count=2,
        toolkit="custommpi",
        command_line="echo rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $(hostname)",
        max_wall_clock_time=1800,
    ).submit()
    assert job.wait(timeout=3600) is JobState.SUCCEEDED, job.status.failure_reason
    lines = job.tail("stdout.txt", 10)
    assert sorted(line.split(" on ")[0] for line in lines if line.startswith("rank")) == [
        "rank 0 of 2",
        "rank 1 of 2",
    ]
    assert len({line.split(" on ")[1] for line in lines if line.startswith("rank")}) == 2  # two machines
    cluster.resize(0)
