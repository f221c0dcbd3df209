"""The health gate: the tools' outputs judged exactly (recorded in the shapes their documentation gives),
thresholds per VM size, the real gloo all-reduce across two nodes, and the scheduler keeping a node that
failed out of placement until a later report passes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchai_sdk import Cluster, HealthReport, JobState, UnhealthyNodesError, ValidationError, Workspace
from batchai_sdk import _layout as layout
from batchai_sdk.node.gate import checks
from batchai_sdk.vm_sizes import health_floors

DATA = Path(__file__).parents[2] / "data" / "health"
NODE_MAIN = Path(checks.__file__).parent.parent / "__main__.py"


def lines(found: list[checks.Check]) -> list[str]:
    return [c.line for c in found]


def test_a_healthy_8_gpu_node_passes_every_gpu_check() -> None:
    gpus = checks.parse_gpus((DATA / "nvidia-smi-8xh100-healthy.csv").read_text())
    found = checks.gpu_checks("node-0", gpus, 8)
    assert all(c.ok for c in found), lines(found)
    assert found[0].line == "node-0 gpu-count 8 >= 8 OK"
    assert len(found) == 1 + 8 * 3  # idle (0x1) and power cap (0x4) are not sickness


def test_a_sick_node_fails_with_one_line_per_fault() -> None:
    gpus = checks.parse_gpus((DATA / "nvidia-smi-8xh100-sick.csv").read_text())
    failed = [c.line for c in checks.gpu_checks("node-1", gpus, 8) if not c.ok]
    assert failed == [
        "node-1 gpu-count 7 >= 8 FAIL",
        "node-1 gpu3-ecc uncorrected=2 FAIL",
        "node-1 gpu3-retired-pages pending=Yes FAIL",
        "node-1 gpu3-throttle reasons=hw_slowdown,hw_thermal FAIL",
    ]


def test_fields_a_gpu_does_not_support_are_not_judged() -> None:
    gpus = checks.parse_gpus((DATA / "nvidia-smi-t4-na.csv").read_text())
    assert [c.name for c in checks.gpu_checks("t4", gpus, 1)] == ["gpu-count", "gpu0-ecc"]


def test_cuda_version_from_the_banner() -> None:
    assert checks.cuda_version((DATA / "nvidia-smi-banner.txt").read_text()) == "12.2"
    assert checks.cuda_version("no banner") is None


def test_dcgm_diagnostics_name_the_failed_test_and_gpu() -> None:
    [failed] = checks.dcgm_checks("node-2", (DATA / "dcgmi-diag-r1-fail.json").read_text())
    assert failed.line == (
        "node-2 dcgm-diag Page Retirement/Row Remap gpu3: GPU 3 had uncorrectable memory errors and row "
        "remapping failed. FAIL"
    )
    [passed] = checks.dcgm_checks("node-2", (DATA / "dcgmi-diag-r1-pass.json").read_text())
    assert passed.ok
    assert not checks.dcgm_checks("node-2", "Error: unable to connect to host engine")[0].ok


def test_nhc_failures_are_read_from_its_log() -> None:
    [c] = checks.nhc_checks("node-3", (DATA / "aznhc.log").read_text())
    assert not c.ok
    assert c.detail == (
        "check_gpu_count: Expected 8 GPUs, found 7; "
        "check_nccl_allreduce: NCCL allreduce bandwidth 212.3 GB/s < 460.0 GB/s"
    )
    assert checks.nhc_checks("n", "Node Health Check completed.  Exit code: 0\n")[0].ok


def test_nccl_version_from_its_library(tmp_path: Path) -> None:
    from batchai_sdk.node.gate.probe import nccl_version

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("a/libnccl.so", "a/libnccl.so.2", "a/libnccl.so.2.18.3", "b/libnccl.so.2.21.5"):
        (tmp_path / name).write_bytes(b"")
    assert nccl_version([str(tmp_path / "a")]) == "2.18.3"
    assert nccl_version([str(tmp_path / "a"), str(tmp_path / "b")]) == "2.21.5"
    assert nccl_version([str(tmp_path / "none")]) is None


def test_the_odd_version_out_is_named() -> None:
    versions = {
        "a": {"driver": "535.161.08", "cuda": "12.2"},
        "b": {"driver": "535.161.08", "cuda": "12.2"},
        "c": {"driver": "550.54.15", "cuda": "12.2"},
    }
    assert lines(checks.versions_agree(versions)) == [
        "c driver-version 550.54.15 != 535.161.08 (the others') FAIL"
    ]
    assert checks.versions_agree({"a": {"driver": "1"}, "b": {"driver": "1"}}) == []


def test_bandwidth_floor_and_sniff_test() -> None:
    found = checks.bandwidth_checks("allreduce", {"n0": 480.0, "n1": 212.3, "n2": 470.0}, 400.0, 0.1)
    assert lines(found) == [
        "n0 allreduce busbw=480.00GB/s OK",
        "n1 allreduce busbw=212.30GB/s < 400 FAIL",
        "n2 allreduce busbw=470.00GB/s OK",
    ]
    # no floor known (CPU nodes): a node far below the others' mean fails, a small dip does not
    found = checks.bandwidth_checks("allreduce", {"n0": 1.0, "n1": 0.2, "n2": 0.6}, None, 0.7)
    assert [c.ok for c in found] == [True, False, True]
    assert found[1].detail == "busbw=0.20GB/s < 30% of the others' 0.80"
    assert not checks.bandwidth_checks("allreduce", {"n0": None}, None, 0.1)[0].ok


def test_a_slow_link_marks_both_ends_and_reasons_join() -> None:
    found = [
        checks.Check("n0<->n1", "link-allreduce", False, "busbw=0.1GB/s < 20"),
        checks.Check("n1", "gpu0-ecc", False, "uncorrected=1"),
        checks.Check("n2", "gpu-count", True, "8 >= 8"),
    ]
    assert checks.unusable(found) == {
        "n0": "n0<->n1 link-allreduce busbw=0.1GB/s < 20 FAIL",
        "n1": "n0<->n1 link-allreduce busbw=0.1GB/s < 20 FAIL; n1 gpu0-ecc uncorrected=1 FAIL",
    }


def test_floors_per_vm_size() -> None:
    assert health_floors("Standard_ND96isr_H100_v5") == (400.0, 20.0)
    assert health_floors("nc4as_t4_v3") == (4.0, 1.0)
    assert health_floors("Standard_D4s_v5") == (None, None)  # not a GPU size we know: sniff test only


def test_levels_are_validated(ws: Workspace) -> None:
    with pytest.raises(ValidationError, match="health_check"):
        ws.create_cluster("c", nodes=1, health_check="thorough")  # type: ignore[arg-type]
    cluster = ws.create_cluster("c", nodes=1)
    assert cluster.spec.health_check == "off"  # local: the machine is what it is
    with pytest.raises(ValidationError, match="level"):
        cluster.check_nodes("off")


def _gate(nodes: list[dict[str, str]], level: str) -> dict[str, object]:
    request = {
        "cluster": {"ssh_command": None, "python": sys.executable, "node_main": str(NODE_MAIN), "health": {}},
        "nodes": nodes,
        "level": level,
    }
    done = subprocess.run(
        [sys.executable, "-S", str(NODE_MAIN), "gate", "run"],
        input=json.dumps(request), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.slow
def test_gloo_all_reduce_between_two_nodes_is_measured() -> None:
    pytest.importorskip("torch")
    nodes = [{"id": "n0", "address": "127.0.0.1"}, {"id": "n1", "address": "127.0.0.1"}]
    report = HealthReport.from_dict(_gate(nodes, "full"))
    by_name = {(c.node, c.name): c for c in report.checks}
    assert set(by_name) == {
        ("n0", "rendezvous"), ("n1", "rendezvous"),  # basic's rows stay in full's report
        ("n0", "allreduce"), ("n1", "allreduce"), ("n0<->n1", "link-allreduce"),
    }  # fmt: skip
    link = by_name[("n0<->n1", "link-allreduce")]
    assert link.ok and float(link.detail.removeprefix("busbw=").removesuffix("GB/s")) > 0
    assert report.nodes == ("n0", "n1") and report.seconds > 0


def test_a_node_that_cannot_run_the_check_is_named() -> None:
    nodes = [{"id": "n0", "address": "127.0.0.1"}]
    request = {
        "cluster": {"ssh_command": None, "python": "/nonexistent/python3", "node_main": str(NODE_MAIN)},
        "nodes": nodes,
        "level": "basic",
    }
    done = subprocess.run(
        [sys.executable, "-S", str(NODE_MAIN), "gate", "run"],
        input=json.dumps(request), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["unusable"]["n0"].startswith("n0 reachable 127.0.0.1: ")
    assert report["unusable"]["n0"].endswith(" FAIL")


def _health_folder(ws: Workspace, cluster: str) -> Path:
    root: Path = ws.share.root  # type: ignore[attr-defined]  # the local backend's share is a folder
    return root / layout.cluster_dir(cluster) / "health"  # the documented place (docs/health.md)


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
