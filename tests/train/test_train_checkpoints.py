"""Where the training scripts keep their state: checkpoint names, finding them, trimming metrics, restarts.

No TensorFlow or PyTorch needed: real files in a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from batchai_sdk.train import checkpoints
from batchai_sdk.train.errors import UserError

pytestmark = pytest.mark.train


def test_checkpoints_are_found_by_suffix_oldest_first(tmp_path: Path) -> None:
    for name in (
        "checkpoint-010.h5",
        "checkpoint-002.h5",
        "checkpoint-003.pt",
        "checkpoint-x.h5",
        "notes.txt",
    ):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "checkpoint-004.h5").mkdir()  # a folder is not a checkpoint
    assert [(e, p.name) for e, p in checkpoints.find_checkpoints(tmp_path)] == [
        (2, "checkpoint-002.h5"), (10, "checkpoint-010.h5")]  # fmt: skip
    assert [(e, p.name) for e, p in checkpoints.find_checkpoints(tmp_path, ".pt")] == [
        (3, "checkpoint-003.pt")
    ]
    assert checkpoints.find_checkpoints(tmp_path / "missing") == []
    assert checkpoints.checkpoint_name(7, ".pt") == "checkpoint-007.pt"
    assert checkpoints.interrupted_name(2, 31) == "interrupted-002-00031.h5"


def test_trim_metrics_keeps_the_epochs_up_to_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"epoch": e, "loss": 1.0 / e}) for e in (1, 2, 3)]
    path.write_text("\n".join([*lines, "not json", "[1]"]) + "\n")
    checkpoints.trim_metrics(path, 2)
    assert path.read_text().splitlines() == lines[:2]
    checkpoints.trim_metrics(tmp_path / "absent.jsonl", 1)  # nothing to trim, no error
    assert not (tmp_path / "absent.jsonl").exists()


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"--resume: no checkpoint-NNN\.h5 in"):
        checkpoints.prepare_outputs(tmp_path / "out", resume=True, restart=0)


def test_restart_without_a_checkpoint_starts_from_epoch_0(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert checkpoints.prepare_outputs(out, resume=False, restart=2) == []
    assert (out / "metrics.jsonl").read_text() == ""
    ckpts = out / "checkpoints"
    for name in (
        "checkpoint-001.h5",
        "checkpoint-002.h5",
        "interrupted-002-00007.h5",
        ".saving-checkpoint-003.h5",
    ):
        (ckpts / name).write_bytes(b"x")
    points = checkpoints.prepare_outputs(out, resume=False, restart=1)
    assert [(e, s, p.name) for e, s, p in points] == [
        (2, 7, "interrupted-002-00007.h5"), (2, 0, "checkpoint-002.h5"), (1, 0, "checkpoint-001.h5")]  # fmt: skip
    # A first run (no restart, no --resume) starts afresh.
    assert checkpoints.prepare_outputs(out, resume=False, restart=0) == []
    assert sorted(p.name for p in ckpts.iterdir()) == [".saving-checkpoint-003.h5"]


@pytest.mark.parametrize(("value", "count"), [("", 0), ("0", 0), ("3", 3), ("x", 0), ("-1", 0)])
def test_restart_count(value: str, count: int) -> None:
    assert checkpoints.restart_count({"AZ_BATCHAI_JOB_RESTART_COUNT": value}) == count
    assert checkpoints.restart_count({}) == 0
