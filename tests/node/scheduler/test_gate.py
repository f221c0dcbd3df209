"""The health gate inside the scheduler (node/scheduler/gate.py), on the local backend: a node that failed is
kept out of placement until a later report passes it, a job that asks for the gate starts after its nodes
pass, and a cluster with a gate checks its nodes when they join."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchai_sdk import Cluster, JobState, UnhealthyNodesError, Workspace
from batchai_sdk import _layout as layout


def _health_folder(ws: Workspace, cluster: str) -> Path:
    root: Path = ws.share.root  # type: ignore[attr-defined]  # the local backend's share is a folder
    return root / layout.SHARE.cluster_dir(cluster) / "health"  # the documented place (docs/health.md)


def _report(cluster: Cluster, level: str, nodes: list[str], unusable: dict[str, str]) -> None:
    """A report as a health tool of the admin's hands it over (docs/health.md)."""
    cluster.apply_health_report({"level": level, "nodes": nodes, "checks": [], "unusable": unusable})


@pytest.mark.slow
def test_a_failed_node_is_kept_out_until_a_report_passes_it(ws: Workspace) -> None:
    cluster = ws.create_cluster("c", nodes=2)
    exp = ws.create_experiment("e")
    [first, second] = list(cluster.node_states())
    why = f"{second} gpu0-ecc uncorrected=3 FAIL"
    _report(cluster, "basic", [first, second], {second: why})
    # the scheduler applies the report and places the job on the healthy node only
    job = exp.create_job("one", cluster=cluster, command_line="echo $BATCHAI_JOB_NODES", toolkit="custom")
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    assert job.tail("stdout.txt") == [first]
    assert cluster.unusable_nodes() == {second: why}
    assert cluster.node_counts.unusable == 1
    events = [e for e in cluster.events() if e.get("kind") == "unusable"]
    assert events and events[-1]["node"] == second and events[-1]["reason"] == why
    # a job that needs both nodes cannot be placed on healthy ones: a typed error naming node and check
    with pytest.raises(UnhealthyNodesError) as err:
        exp.create_job("two", cluster=cluster, node_count=2, command_line="true", toolkit="custom").submit()
    assert err.value.failures == {second: why} and err.value.succeeded == [first]
    assert "gpu0-ecc uncorrected=3" in str(err.value)
    # a later report that passes the node lets it take jobs again
    _report(cluster, "basic", [second], {})
    job2 = exp.create_job("two-again", cluster=cluster, node_count=2, command_line="true", toolkit="custom")
    job2.submit()
    assert job2.wait(timeout=120) is JobState.SUCCEEDED
    assert cluster.unusable_nodes() == {}


@pytest.mark.slow
def test_a_job_that_asks_for_the_gate_starts_after_its_nodes_pass(ws: Workspace) -> None:
    pytest.importorskip("torch")
    cluster = ws.create_cluster("j", nodes=2)  # no gate on the cluster: the job asks for one
    exp = ws.create_experiment("e")
    job = exp.create_job("gated", cluster=cluster, node_count=2, command_line="true", toolkit="custom",
                         health_check="basic")  # fmt: skip
    job.submit()
    assert job.wait(timeout=180) is JobState.SUCCEEDED
    [report] = [json.loads(p.read_text()) for p in _health_folder(ws, "j").glob("*.json")]
    assert sorted(report["nodes"]) == sorted(cluster.node_states()) and report["unusable"] == {}
    copy = json.loads("\n".join(job.tail("health-check.json", lines=10_000)))
    assert copy == report  # the job's own copy, beside its logs
    plain = exp.create_job("plain", cluster=cluster, command_line="true", toolkit="custom")
    plain.submit()
    assert plain.wait(timeout=60) is JobState.SUCCEEDED
    assert len(list(_health_folder(ws, "j").glob("*.json"))) == 1  # a job without the gate: no check


@pytest.mark.slow
def test_a_cluster_with_a_gate_checks_its_nodes_when_they_join(ws: Workspace) -> None:
    pytest.importorskip("torch")
    cluster = ws.create_cluster("g", nodes=2, health_check="basic")
    job = ws.create_experiment("e").create_job("j", cluster=cluster, command_line="true", toolkit="custom")
    job.submit()
    assert job.wait(timeout=180) is JobState.SUCCEEDED
    health = _health_folder(ws, "g")
    [report] = [json.loads(p.read_text()) for p in health.glob("*.json")]
    assert report["level"] == "basic" and sorted(report["nodes"]) == sorted(cluster.node_states())
    assert {c["name"] for c in report["checks"]} == {"rendezvous"} and report["unusable"] == {}
