"""What a healthy node is: the gate's checks as pure functions over the tools' outputs.

Standard library only (the head node and every node import it). Each check gives a ``Check``: one node,
one name, pass or fail, and one line a person reads (``node-1 allreduce busbw=212.3GB/s < 400 FAIL``).
The parsers take the documented output of ``nvidia-smi --query-gpu ... --format=csv,noheader,nounits``,
``dcgmi diag -r 1 -j`` and the log of Azure's azurehpc-health-checks (NHC); the bandwidth rules are
Megatron-LM's sniff test (a rank more than a tolerance below the mean of its peers) plus a floor per VM
size where one is known.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from ..protocol.names import LEVELS as LEVELS  # names.py spells them once

# nvidia-smi's query: the order of these fields is the order of the CSV columns parse_gpus reads.
GPU_QUERY = (
    "index,name,uuid,driver_version,ecc.errors.uncorrected.volatile.total,retired_pages.pending,"
    "clocks_throttle_reasons.active,temperature.gpu"
)
# NVML's clocks-throttle reasons that mean a sick GPU, not a busy or idle one (nvmlClocksThrottleReason*).
BAD_THROTTLE = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
CUDA_VERSION = re.compile(r"CUDA Version:\s*([0-9.]+)")
NHC_FAILED = re.compile(r"Health check failed:\s*(.*)$")


@dataclass(frozen=True)
class Check:
    node: str
    name: str
    ok: bool
    detail: str  # the measured value against what was expected, e.g. "busbw=212.3GB/s < 400"

    @property
    def line(self) -> str:
        return f"{self.node} {self.name} {self.detail} {'OK' if self.ok else 'FAIL'}"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "line": self.line}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Check:
        return cls(str(d["node"]), str(d["name"]), bool(d["ok"]), str(d["detail"]))


def _na(value: str) -> bool:
    return value.strip().startswith("[") or value.strip() in ("", "N/A")  # [N/A], [Not Supported]


def parse_gpus(csv_text: str) -> list[dict[str, str]]:
    """The rows of ``nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits``."""
    keys = GPU_QUERY.split(",")
    rows = []
    for line in csv_text.splitlines():
        if line.strip():
            values = [v.strip() for v in line.split(",")]
            rows.append(dict(zip(keys, values + [""] * (len(keys) - len(values)), strict=False)))
    return rows


def gpu_checks(node: str, gpus: Sequence[Mapping[str, str]], expected: int) -> list[Check]:
    """GPU count against the VM size, uncorrected ECC errors, pending retired pages, bad throttling."""
    out = [Check(node, "gpu-count", len(gpus) >= expected, f"{len(gpus)} >= {expected}")]
    for gpu in gpus:
        idx = gpu.get("index", "?")
        ecc = gpu.get("ecc.errors.uncorrected.volatile.total", "")
        if not _na(ecc):
            out.append(Check(node, f"gpu{idx}-ecc", int(ecc) == 0, f"uncorrected={ecc}"))
        pending = gpu.get("retired_pages.pending", "")
        if not _na(pending):
            out.append(Check(node, f"gpu{idx}-retired-pages", pending.lower() == "no", f"pending={pending}"))
        reasons = gpu.get("clocks_throttle_reasons.active", "")
        if not _na(reasons):
            active = [name for bit, name in BAD_THROTTLE.items() if int(reasons, 16) & bit]
            out.append(Check(node, f"gpu{idx}-throttle", not active, f"reasons={','.join(active) or 'none'}"))
    return out


def cuda_version(nvidia_smi_banner: str) -> str | None:
    """``CUDA Version: 12.4`` from the banner of plain ``nvidia-smi``."""
    m = CUDA_VERSION.search(nvidia_smi_banner)
    return m.group(1) if m else None


def dcgm_checks(node: str, diag_json: str) -> list[Check]:
    """Every failed test of ``dcgmi diag -r N -j`` (the "DCGM GPU Diagnostic" document) as a FAIL."""
    try:
        doc = json.loads(diag_json)
    except ValueError:
        return [Check(node, "dcgm", False, "dcgmi gave no JSON")]
    body = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic") or {}
    failed = []
    for category in body.get("test_categories", []):
        for test in category.get("tests", []):
            for result in test.get("results", []):
                if str(result.get("status", "")).lower() == "fail":
                    gpu = result.get("gpu_id", result.get("gpu_ids", "?"))
                    why = _first_warning(result.get("warnings"))
                    failed.append(f"{test.get('name', '?')} gpu{gpu}" + (f": {why}" if why else ""))
    return [Check(node, "dcgm-diag", not failed, "; ".join(failed) or "all tests pass")]


def _first_warning(warnings: object) -> str:
    if isinstance(warnings, list) and warnings:
        first = warnings[0]
        return str(first.get("warning", first) if isinstance(first, dict) else first)
    return str(warnings) if isinstance(warnings, str) else ""


def nhc_checks(node: str, log_text: str) -> list[Check]:
    """azurehpc-health-checks' log: each ``Health check failed: ...`` line is a FAIL."""
    failed = [m.group(1).strip() for line in log_text.splitlines() if (m := NHC_FAILED.search(line))]
    return [Check(node, "nhc", not failed, "; ".join(failed) or "all checks pass")]


def versions_agree(versions: Mapping[str, Mapping[str, str | None]]) -> list[Check]:
    """One check per node and component (driver, cuda, nccl) whose version differs from the majority's."""
    out = []
    for component in sorted({k for v in versions.values() for k in v}):
        seen = {node: v.get(component) for node, v in versions.items() if v.get(component)}
        if len(set(seen.values())) <= 1:
            continue
        counts: dict[str | None, int] = {}
        for value in seen.values():
            counts[value] = counts.get(value, 0) + 1
        majority = max(sorted(counts, key=str), key=lambda v: counts[v])
        for node, value in sorted(seen.items()):
            if value != majority:
                out.append(Check(node, f"{component}-version", False, f"{value} != {majority} (the others')"))
    return out


def busbw(bytes_: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth in GB/s (nccl-tests' definition: algbw x 2(n-1)/n)."""
    return bytes_ / seconds / 1e9 * (2 * (world - 1) / world) if seconds > 0 and world > 1 else 0.0


def bandwidth_checks(
    name: str, measured: Mapping[str, float | None], floor: float | None, tolerance: float
) -> list[Check]:
    """A node (or a link) fails when it is below the size's floor or more than ``tolerance`` below the
    mean of the others (Megatron-LM's sniff test). ``None``: the measurement itself failed."""
    out = []
    for key, value in sorted(measured.items()):
        if value is None:
            out.append(Check(key, name, False, "busbw=none (the all-reduce did not complete)"))
            continue
        others = [v for k, v in measured.items() if k != key and v is not None]
        mean = sum(others) / len(others) if others else None
        if floor is not None and value < floor:
            out.append(Check(key, name, False, f"busbw={value:.2f}GB/s < {floor:g}"))
        elif mean is not None and value < mean * (1 - tolerance):
            share = f"{1 - tolerance:.0%} of the others' {mean:.2f}"
            out.append(Check(key, name, False, f"busbw={value:.2f}GB/s < {share}"))
        else:
            out.append(Check(key, name, True, f"busbw={value:.2f}GB/s"))
    return out


def unusable(checks: Iterable[Check]) -> dict[str, str]:
    """node -> its failed checks' lines, joined: the reason a node is kept out of placement."""
    out: dict[str, list[str]] = {}
    for c in checks:
        if not c.ok:
            for node in c.node.split("<->"):  # a slow link marks both ends
                out.setdefault(node, []).append(c.line)
    return {node: "; ".join(lines) for node, lines in out.items()}
