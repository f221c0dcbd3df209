"""Opt-in: the tutorial on a real Azure subscription. Costs money; always deletes what it made.

    BATCHAI_LIVE_AZURE=1 AZURE_SUBSCRIPTION_ID=<id> pytest -m azure_live tests/azure/test_azure_live.py

Credentials come from DefaultAzureCredential (``az login``, or AZURE_CLIENT_ID/AZURE_TENANT_ID/
AZURE_CLIENT_SECRET). Optional: BATCHAI_LIVE_LOCATION (eastus), BATCHAI_LIVE_VM_SIZE
(Standard_NC4as_T4_v3), BATCHAI_LIVE_NODES (2), BATCHAI_LIVE_PRIORITY (dedicated), BATCHAI_LIVE_SSH_CIDR
(default: this machine's public address), BATCHAI_LIVE_IMAGE. Each test makes its own resource group
``batchai-live-<random>`` and deletes it in ``finally``, waiting for the deletion.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import Workspace
from batchai_sdk._models import JobState, NodeCounts
from batchai_sdk.train import module_path

pytestmark = [
    pytest.mark.azure_live,
    pytest.mark.skipif(
        os.environ.get("BATCHAI_LIVE_AZURE") != "1" or not os.environ.get("AZURE_SUBSCRIPTION_ID"),
        reason="live Azure tests are opt-in: BATCHAI_LIVE_AZURE=1 and AZURE_SUBSCRIPTION_ID",
    ),
    pytest.mark.timeout(4 * 3600),
]


def live_options(tmp_path: Path) -> dict[str, Any]:
    options: dict[str, Any] = {
        "resource_group": f"batchai-live-{secrets.token_hex(4)}",
        "location": os.environ.get("BATCHAI_LIVE_LOCATION", "eastus"),
        "state_dir": tmp_path / "state",
    }
    if os.environ.get("BATCHAI_LIVE_SSH_CIDR"):
        options["ssh_source_cidr"] = os.environ["BATCHAI_LIVE_SSH_CIDR"]
    if os.environ.get("BATCHAI_LIVE_IMAGE"):
        options["image"] = os.environ["BATCHAI_LIVE_IMAGE"]
    return options


@pytest.fixture
def live_ws(tmp_path: Path) -> Iterator[Workspace]:
    ws = Workspace.azure("batchailive", **live_options(tmp_path))
    try:
        yield ws
    finally:
        ws.delete(force=True)  # the resource group this test created, and everything in it


def test_live_share_roundtrip(live_ws: Workspace, tmp_path: Path) -> None:
    data = os.urandom(9 * 1024 * 1024)
    (tmp_path / "blob.bin").write_bytes(data)
    live_ws.share.upload(tmp_path / "blob.bin", "live/blob.bin")
    assert live_ws.share.read_bytes("live/blob.bin", 1000, 10) == data[1000:1010]
    out = live_ws.share.download("live/blob.bin", tmp_path / "back.bin")
    assert out.read_bytes() == data


def test_live_tutorial(live_ws: Workspace, tmp_path: Path) -> None:
    nodes = int(os.environ.get("BATCHAI_LIVE_NODES", "2"))
    exp = live_ws.create_experiment("cifar")
    cluster = live_ws.create_cluster(
        "nc6cluster",
        vm_size=os.environ.get("BATCHAI_LIVE_VM_SIZE", "Standard_NC4as_T4_v3"),
        nodes=nodes,
        vm_priority=os.environ.get("BATCHAI_LIVE_PRIORITY", "dedicated"),
    )
    started = time.monotonic()
    cluster.wait_until_steady(timeout=3600, poll_interval=30)
    deadline = time.monotonic() + 3600
    while cluster.node_counts != NodeCounts(idle=nodes):
        assert time.monotonic() < deadline, cluster.node_counts
        assert cluster.node_counts.unusable == 0, live_ws.backend.cluster_status(cluster.spec).reasons
        time.sleep(30)
    print(f"cluster idle after {time.monotonic() - started:.0f}s")

    script = tmp_path / "cifar_cnn_distributed.py"
    shutil.copy(module_path("cifar10"), script)
    live_ws.share.upload(script, "cifar/cifar_cnn_distributed.py")
    job = exp.create_job(
        "cifar_distributed",
        cluster=cluster,
        node_count=nodes,
        python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/cifar_cnn_distributed.py",
        args=["--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar", "--epochs", "2"],
    )
    job.submit()
    for line in job.stream("stdout.txt", poll_interval=5):
        print(line)
    assert job.wait(timeout=3600) is JobState.SUCCEEDED, job.tail("stderr.txt", 40)
    model = live_ws.share.download("cifar/saved_models/keras_cifar10_trained_model.h5", tmp_path / "model.h5")
    assert model.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
    cluster.resize(0, wait=True, timeout=1800)
    assert cluster.node_counts == NodeCounts()
