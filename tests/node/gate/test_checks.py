"""The health gate's checks (node/gate/checks.py): the tools' outputs judged exactly (recorded in the shapes
their documentation gives), thresholds per VM size, and the levels a cluster or job may ask for."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchai_sdk import ValidationError, Workspace
from batchai_sdk.node.gate import checks
from batchai_sdk.vm_sizes import health_floors

DATA = Path(__file__).parents[2] / "data" / "health"


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
