"""``cluster.simulate_eviction`` on Azure: Azure's own simulateEviction for a Spot node (the real SDK client
against the fake ARM); a dedicated cluster, which Azure cannot evict, gets the share's simulated notice."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest
import responses
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk import _layout as layout
from batchai_sdk.backends.azure import AzureBackend
from batchai_sdk.exceptions import AzureError


def publish_job_on(ws: Workspace, cluster: str, node: str, job: str = "cifar/train") -> None:
    """What the cluster's scheduler publishes on the share while ``job`` holds ``node``."""
    ws.share.write_json(
        layout.SHARE.nodes_record(cluster), {"nodes": {node: {"job": job, "phase": "running"}}}
    )


def test_a_spot_node_is_evicted_by_azure_with_its_instance_id(
    make_backend: Callable[..., AzureBackend],
    arm: FakeArm,
    files: FakeFilesService,
    mock: responses.RequestsMock,
) -> None:
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("spot", vm_size="Standard_NC4as_T4_v3", nodes=3, vm_priority="lowpriority")
    arm.make_ready()
    nodes = [n.id for n in ws.backend.cluster_status(cluster.spec).nodes]
    assert nodes == ["spot_0", "spot_1", "spot_2"]
    publish_job_on(ws, "spot", "spot_1")

    assert cluster.simulate_eviction("spot_1") == "cifar/train"

    rid = arm.rg_id("batchai.horovod") + "/providers/Microsoft.Compute/virtualMachineScaleSets/spot"
    assert arm.evicted == [(rid, "1")]
    posts = [
        c.request.url
        for c in mock.calls
        if c.request.method == "POST" and "simulateEviction" in c.request.url
    ]
    assert len(posts) == 1
    url = urlsplit(posts[0])
    assert url.path == f"{rid}/virtualMachines/1/simulateEviction"
    # the api-version of the compute client in use: the one its scale set PUT was sent with
    put = next(
        c.request.url for c in mock.calls if c.request.method == "PUT" and urlsplit(c.request.url).path == rid
    )
    assert parse_qs(url.query)["api-version"] == parse_qs(urlsplit(put).query)["api-version"]
    # Azure's notice reaches the node (Scheduled Events): no simulated one is left on the share
    assert not ws.share.exists(layout.SHARE.run_dir("cifar", "train") + "/simulate-eviction-spot_1.json")
    # the evicted VM leaves the cluster, as with eviction policy Delete
    status = ws.backend.cluster_status(cluster.spec)
    assert status.node_states.get("spot_1") is not None and status.node_states["spot_1"].value == "leaving"


def test_a_dedicated_node_gets_the_simulated_notice_instead(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, files: FakeFilesService
) -> None:
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("ded", vm_size="Standard_NC4as_T4_v3", nodes=2)
    arm.make_ready()
    ws.backend.cluster_status(cluster.spec)
    publish_job_on(ws, "ded", "ded_0")

    assert cluster.simulate_eviction() == "cifar/train"  # default: the first node running a job
    assert arm.evicted == [] and arm.count("POST", "simulateEviction") == 0
    notice = ws.share.read_json_or_none(
        layout.SHARE.run_dir("cifar", "train") + "/simulate-eviction-ded_0.json"
    )
    assert notice is not None and notice["event_type"] == "Preempt" and notice["grace_seconds"] == 30.0


def test_an_eviction_azure_refuses_is_an_azure_error_naming_the_node(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, files: FakeFilesService
) -> None:
    ws = Workspace(make_backend())
    cluster = ws.create_cluster("spot", vm_size="Standard_NC4as_T4_v3", nodes=1, vm_priority="lowpriority")
    arm.make_ready()
    publish_job_on(ws, "spot", "spot_0")
    arm.inject(
        "POST",
        r"/simulateEviction$",
        409,
        {"error": {"code": "OperationNotAllowed", "message": "The VM is already being evicted."}},
    )
    with pytest.raises(AzureError) as err:
        cluster.simulate_eviction("spot_0")
    assert err.value.code == "OperationNotAllowed"
    assert "spot_0" in str(err.value) and "instance 0" in str(err.value)
