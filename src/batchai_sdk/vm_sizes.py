"""Azure GPU VM sizes: GPUs per VM, GPU model, retirement — and the preflight that refuses retired sizes.

Batch AI's tutorials use ``Standard_NC6`` (one K80), a size Azure retired on 2023-09-06 together with the
rest of NC, NCv2 and ND; NCv3 (V100) followed on 2025-09-30. On the Azure backend a retired size is
refused before any resource exists (``UnsupportedVMSizeError`` naming the current equivalents); on the
local and SSH backends the size is only a label, so the tutorial's ``Standard_NC6`` keeps working there
with a warning.

Sizes not in this table are let through: whether Azure offers a size in a region is for the Resource
SKUs API to say, not for a table.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from .exceptions import UnsupportedVMSizeError

RETIRED_2023 = "2023-09-06"  # NC, NCv2, ND, NV (Kepler, Pascal, Maxwell)
RETIRED_2025 = "2025-09-30"  # NCv3 (V100)

# Current equivalents, by what the retired size offered (the first is the closest in GPUs per VM).
_ONE_GPU = ("Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4")
_ONE_GPU_TRAINING = ("Standard_NC24ads_A100_v4", "Standard_NC40ads_H100_v5", "Standard_NC4as_T4_v3")
_TWO_GPU = ("Standard_NC48ads_A100_v4", "Standard_NC80adis_H100_v5")
_FOUR_GPU = ("Standard_NC96ads_A100_v4", "Standard_NC64as_T4_v3")
_FOUR_GPU_RDMA = ("Standard_NC96ads_A100_v4", "Standard_ND96isr_H100_v5")
_VISUAL = ("Standard_NV36ads_A10_v5", "Standard_NV72ads_A10_v5")


@dataclass(frozen=True)
class VMSize:
    name: str
    family: str
    gpus: int  # GPU devices the VM sees (a fractional A10 partition counts as one)
    gpu_model: str
    retired: str | None = None  # ISO date Azure retired it; None while offered
    successors: tuple[str, ...] = ()

    @property
    def is_retired(self) -> bool:
        return self.retired is not None


def _family(
    family: str,
    gpu_model: str,
    sizes: dict[str, int],
    retired: str | None = None,
    successors: dict[str, tuple[str, ...]] | None = None,
) -> list[VMSize]:
    return [
        VMSize(name, family, gpus, gpu_model, retired, (successors or {}).get(name, ()))
        for name, gpus in sizes.items()
    ]


_TABLE: list[VMSize] = [
    # retired 2023-09-06
    *_family(
        "NC",
        "NVIDIA K80",
        {"Standard_NC6": 1, "Standard_NC12": 2, "Standard_NC24": 4, "Standard_NC24r": 4},
        RETIRED_2023,
        {
            "Standard_NC6": _ONE_GPU,
            "Standard_NC12": _TWO_GPU,
            "Standard_NC24": _FOUR_GPU,
            "Standard_NC24r": _FOUR_GPU_RDMA,
        },
    ),
    *_family(
        "NCv2",
        "NVIDIA P100",
        {"Standard_NC6s_v2": 1, "Standard_NC12s_v2": 2, "Standard_NC24s_v2": 4, "Standard_NC24rs_v2": 4},
        RETIRED_2023,
        {
            "Standard_NC6s_v2": _ONE_GPU_TRAINING,
            "Standard_NC12s_v2": _TWO_GPU,
            "Standard_NC24s_v2": _FOUR_GPU,
            "Standard_NC24rs_v2": _FOUR_GPU_RDMA,
        },
    ),
    *_family(
        "ND",
        "NVIDIA P40",
        {"Standard_ND6s": 1, "Standard_ND12s": 2, "Standard_ND24s": 4, "Standard_ND24rs": 4},
        RETIRED_2023,
        {
            "Standard_ND6s": _ONE_GPU_TRAINING,
            "Standard_ND12s": _TWO_GPU,
            "Standard_ND24s": _FOUR_GPU,
            "Standard_ND24rs": _FOUR_GPU_RDMA,
        },
    ),
    *_family(
        "NV",
        "NVIDIA M60",
        {"Standard_NV6": 1, "Standard_NV12": 2, "Standard_NV24": 4},
        RETIRED_2023,
        {"Standard_NV6": _VISUAL, "Standard_NV12": _VISUAL[1:], "Standard_NV24": _VISUAL[1:]},
    ),
    # retired 2025-09-30
    *_family(
        "NCv3",
        "NVIDIA V100",
        {"Standard_NC6s_v3": 1, "Standard_NC12s_v3": 2, "Standard_NC24s_v3": 4, "Standard_NC24rs_v3": 4},
        RETIRED_2025,
        {
            "Standard_NC6s_v3": _ONE_GPU_TRAINING,
            "Standard_NC12s_v3": _TWO_GPU,
            "Standard_NC24s_v3": _FOUR_GPU,
            "Standard_NC24rs_v3": _FOUR_GPU_RDMA,
        },
    ),
    # current
    *_family(
        "NCasT4_v3",
        "NVIDIA T4",
        {
            "Standard_NC4as_T4_v3": 1,
            "Standard_NC8as_T4_v3": 1,
            "Standard_NC16as_T4_v3": 1,
            "Standard_NC64as_T4_v3": 4,
        },
    ),
    *_family(
        "NC_A100_v4",
        "NVIDIA A100 80GB PCIe",
        {"Standard_NC24ads_A100_v4": 1, "Standard_NC48ads_A100_v4": 2, "Standard_NC96ads_A100_v4": 4},
    ),
    *_family(
        "NCads_H100_v5",
        "NVIDIA H100 NVL",
        {"Standard_NC40ads_H100_v5": 1, "Standard_NC80adis_H100_v5": 2},
    ),
    *_family("ND_H100_v5", "NVIDIA H100 80GB SXM", {"Standard_ND96isr_H100_v5": 8}),
    *_family("ND_A100_v4", "NVIDIA A100 40GB SXM", {"Standard_ND96asr_v4": 8}),
    *_family(
        "NVadsA10_v5",
        "NVIDIA A10 (partitioned below NV36)",
        {
            "Standard_NV6ads_A10_v5": 1,
            "Standard_NV12ads_A10_v5": 1,
            "Standard_NV18ads_A10_v5": 1,
            "Standard_NV36ads_A10_v5": 1,
            "Standard_NV36adms_A10_v5": 1,
            "Standard_NV72ads_A10_v5": 2,
        },
    ),
]

SIZES: dict[str, VMSize] = {s.name.lower(): s for s in _TABLE}


def lookup(size: str) -> VMSize | None:
    """The table's entry for ``size`` (case-insensitive, ``Standard_`` may be left out), or None."""
    key = size.strip().lower()
    return SIZES.get(key) or SIZES.get("standard_" + key)


def gpus_for(size: str) -> int | None:
    """GPUs per VM of ``size``; None when the size is not in the table (not a GPU size we know)."""
    entry = lookup(size)
    return None if entry is None else entry.gpus


def check_vm_size(size: str, backend_kind: str) -> VMSize | None:
    """Preflight a VM size for a backend (``"azure"``, ``"local"``, ``"ssh"``, ...).

    A retired size raises ``UnsupportedVMSizeError`` (with the current equivalents) on Azure, where no
    VM of it could be made; elsewhere the size is a label and it only warns. Returns the table's entry
    (None for sizes the table does not know, which pass).
    """
    entry = lookup(size)
    if entry is None or entry.retired is None:
        return entry
    if backend_kind == "azure":
        raise UnsupportedVMSizeError(size, entry.retired, entry.successors)
    warnings.warn(
        f"{entry.name} was retired by Azure on {entry.retired}; it is only a label on the "
        f"{backend_kind} backend (on Azure use {', '.join(entry.successors) or 'a current size'})",
        UserWarning,
        stacklevel=2,
    )
    return entry


# The health gate's all-reduce floors per family, in GB/s of bus bandwidth (nccl-tests' busbw): within a
# node across its GPUs, and between two nodes with one rank each. About half of what a healthy VM of the
# family measures (NVLink/NVSwitch within ND and NC H100 NVL pairs, PCIe within the others; InfiniBand
# between ND VMs, accelerated Ethernet between the others), so only a sick node or link falls below.
HEALTH_FLOORS: dict[str, tuple[float | None, float | None]] = {
    "ND_H100_v5": (400.0, 20.0),
    "ND_A100_v4": (180.0, 10.0),
    "NCads_H100_v5": (100.0, 1.0),
    "NC_A100_v4": (10.0, 1.0),
    "NCasT4_v3": (4.0, 1.0),
    "NVadsA10_v5": (None, 1.0),
}


def health_floors(size: str) -> tuple[float | None, float | None]:
    """(within a node, between nodes) all-reduce floors in GB/s for ``size``; None where not known."""
    entry = lookup(size)
    return HEALTH_FLOORS.get(entry.family, (None, None)) if entry is not None else (None, None)
