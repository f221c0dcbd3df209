"""Why a job waits on Azure Batch: its task is active and its pool's states say why (a core quota, a pool
that grows, nodes being prepared or unusable, a pool at zero), through the real ``azure-batch`` client
against the fake service (pools, nodes and resize errors in the shapes of the official examples)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import FakeCredential
from batch_helpers import batch_workspace

from batchai_sdk import JobState, Workspace

pytest.importorskip("azure.batch")

T4 = "Standard_NC4as_T4_v3"
QUOTA = {
    "code": "AccountCoreQuotaReached",
    "message": "The specified account has reached VM core quota. Please request a quota increase.",
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[Workspace, Any]]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        ws, _arm, service, _files = batch_workspace(mock, tmp_path, credential=FakeCredential())
        ws.create_cluster("nc", vm_size=T4, nodes=2, idle_seconds_before_scaledown=None)
        yield ws, service


def _queued(ws: Workspace, tmp_path: Path) -> Any:
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    exp = ws.create_experiment("cifar", exist_ok=True)
    return exp.create_job("j", cluster="nc", node_count=2, python_script=str(script)).submit()


def test_nodes_being_prepared_and_unusable_nodes_are_named(env: Any, tmp_path: Path) -> None:
    ws, service = env
    job = _queued(ws, tmp_path)
    ids = [n["id"] for n in service.nodes["nc"]]
    service.set_node("nc", 0, state="starting")
    service.set_node("nc", 1, state="waitingforstarttask")
    st = job.status
    assert st.state is JobState.QUEUED and st.pending is not None
    assert st.pending.kind == "preparing_nodes"
    assert dict(st.pending.nodes) == {ids[0]: "starting", ids[1]: "waitingforstarttask"}
    service.set_node("nc", 0, state="starttaskfailed")
    service.set_node("nc", 1, state="idle")
    why = job.status.pending
    assert why is not None and why.kind == "nodes_unhealthy"
    assert dict(why.nodes) == {ids[0]: "starttaskfailed"} and "1 of 2 are usable" in why.message


def test_a_pool_that_cannot_grow_names_the_quota_and_one_that_grows_says_so(env: Any, tmp_path: Path) -> None:
    ws, service = env
    job = _queued(ws, tmp_path)
    pool = service.pools["nc"]
    service.nodes["nc"] = service.nodes["nc"][:1]
    pool.update(allocationState="resizing")
    why = job.status.pending
    assert why is not None and why.kind == "scaling_up" and "grows from 1 to 2" in why.message
    pool.update(allocationState="steady", resizeErrors=[QUOTA])
    why = job.status.pending
    assert why is not None and why.kind == "quota" and why.source == "AccountCoreQuotaReached"
    assert "reached VM core quota" in why.message
    pool.update(resizeErrors=[], targetDedicatedNodes=0, currentDedicatedNodes=0)
    service.nodes["nc"] = []
    why = job.status.pending
    assert why is not None and why.kind == "cluster_at_zero"
    # the table's column and job show say it too
    assert job.to_dict()["pending"]["kind"] == "cluster_at_zero"
