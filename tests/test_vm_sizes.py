"""VM size preflight: retired sizes refused on Azure with their successors, a warning elsewhere."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest

from batchai_sdk.exceptions import UnsupportedVMSizeError, ValidationError
from batchai_sdk.vm_sizes import SIZES, check_vm_size, gpus_for, lookup


@pytest.mark.parametrize(
    ("size", "retired", "first"),
    [
        ("Standard_NC6", "2023-09-06", "Standard_NC4as_T4_v3"),
        ("standard_nc24r", "2023-09-06", "Standard_NC96ads_A100_v4"),
        ("Standard_NC12s_v2", "2023-09-06", "Standard_NC48ads_A100_v4"),
        ("Standard_ND24s", "2023-09-06", "Standard_NC96ads_A100_v4"),
        ("Standard_NC6s_v3", "2025-09-30", "Standard_NC24ads_A100_v4"),
        ("Standard_NC24rs_v3", "2025-09-30", "Standard_NC96ads_A100_v4"),
    ],
)
def test_retired_sizes_refused_on_azure_with_successors(size: str, retired: str, first: str) -> None:
    with pytest.raises(UnsupportedVMSizeError) as info:
        check_vm_size(size, "azure")
    err = info.value
    assert isinstance(err, ValidationError) and err.field == "vm_size"
    assert err.size == size and err.retired == retired and err.suggestions[0] == first
    assert first in str(err) and retired in str(err)


def test_every_successor_is_a_current_size_with_at_least_the_gpus() -> None:
    for entry in SIZES.values():
        for name in entry.successors:
            succ = lookup(name)
            assert succ is not None and not succ.is_retired, name
        if entry.successors:
            assert lookup(entry.successors[0]).gpus >= entry.gpus or entry.family == "NV"  # type: ignore[union-attr]


@pytest.mark.parametrize("backend", ["local", "ssh"])
def test_retired_size_only_warns_elsewhere(backend: str) -> None:
    with pytest.warns(UserWarning, match="Standard_NC6 was retired by Azure on 2023-09-06"):
        entry = check_vm_size("Standard_NC6", backend)
    assert entry is not None and entry.gpus == 1


@pytest.mark.parametrize(
    "size",
    ["Standard_NC4as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_ND96isr_H100_v5", "Standard_D4s_v5"],
)
def test_current_and_unknown_sizes_pass_silently(size: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_vm_size(size, "azure")


@pytest.mark.parametrize(
    ("size", "gpus"),
    [
        ("Standard_NC6", 1),
        ("NC24r", 4),
        ("Standard_NC64as_T4_v3", 4),
        ("Standard_NC48ads_A100_v4", 2),
        ("Standard_NC80adis_H100_v5", 2),
        ("Standard_ND96isr_H100_v5", 8),
        ("Standard_NV6ads_A10_v5", 1),
        ("Standard_D4s_v5", None),
    ],
)
def test_gpus_for(size: str, gpus: int | None) -> None:
    assert gpus_for(size) == gpus


def test_the_retired_size_warning_points_at_the_callers_line(tmp_path: Path) -> None:
    from batchai_sdk import Workspace

    ws = Workspace.local(root=tmp_path / "ws")
    with pytest.warns(UserWarning, match="Standard_NC6 was retired") as caught:
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)
