"""Where the training scripts keep their state in ``--dir``: epoch checkpoints, SIGTERM checkpoints, the
metrics file, and how a restarted job knows it is one (``AZ_BATCHAI_JOB_RESTART_COUNT``).

File names: ``checkpoint-NNN<suffix>`` after NNN epochs (``.h5`` for Keras, ``.pt`` for PyTorch) and, for
Keras, ``interrupted-NNN-SSSSS.h5`` saved on SIGTERM after NNN epochs and SSSSS steps of the next.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .errors import UserError

RESTART_COUNT_VARIABLE = "AZ_BATCHAI_JOB_RESTART_COUNT"
KERAS_SUFFIX = ".h5"
_INTERRUPTED_RE = re.compile(r"^interrupted-(\d+)-(\d+)\.h5$")


def checkpoint_name(epoch: int, suffix: str = KERAS_SUFFIX) -> str:
    """``checkpoint-NNN<suffix>``: the checkpoint written after ``epoch`` epochs."""
    return f"checkpoint-{epoch:03d}{suffix}"


def interrupted_name(epoch: int, step: int) -> str:
    """``interrupted-NNN-SSSSS.h5``: saved on SIGTERM at ``step`` of epoch ``epoch`` + 1 (Keras)."""
    return f"interrupted-{epoch:03d}-{step:05d}{KERAS_SUFFIX}"


def find_checkpoints(folder: Path, suffix: str = KERAS_SUFFIX) -> list[tuple[int, Path]]:
    """(epoch, path) of the ``checkpoint-NNN<suffix>`` files in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    pattern = re.compile(r"^checkpoint-(\d+)" + re.escape(suffix) + "$")
    found = []
    for path in folder.iterdir():
        match = pattern.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def find_resume_points(folder: Path) -> list[tuple[int, int, Path]]:
    """(epochs done, steps of the next epoch done, path) of the Keras checkpoints in ``folder``, oldest first.

    ``checkpoint-NNN.h5`` is (NNN, 0); ``interrupted-NNN-SSSSS.h5``, saved on SIGTERM, is (NNN, SSSSS).
    """
    found = [(epoch, 0, path) for epoch, path in find_checkpoints(folder)]
    if folder.is_dir():
        for path in folder.iterdir():
            match = _INTERRUPTED_RE.match(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), int(match.group(2)), path))
    return sorted(found)


def prepare_outputs(out_dir: Path, resume: bool, restart: int) -> list[tuple[int, int, Path]]:
    """Rank 0: create the output folders; the Keras checkpoints to resume from (newest first), or clear them.

    ``--resume`` needs a checkpoint; a restart (``restart`` > 0) takes one if there is any and otherwise
    starts from epoch 0; a first run clears earlier checkpoints and metrics.
    """
    ckpt_dir = out_dir / "checkpoints"
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {ckpt_dir}: {exc.strerror or exc}") from exc
    points = find_resume_points(ckpt_dir)
    if resume or restart:
        if not points and resume:
            raise UserError(f"--resume: no checkpoint-NNN.h5 in {ckpt_dir}; run without --resume to start")
        if points:
            return points[::-1]
    for *_, path in points:
        path.unlink()
    (out_dir / "metrics.jsonl").write_text("", encoding="utf-8")
    return []


def restart_count(environ: Mapping[str, str] | None = None) -> int:
    """``AZ_BATCHAI_JOB_RESTART_COUNT`` as an integer (0 when unset or not a number >= 0)."""
    text = (os.environ if environ is None else environ).get(RESTART_COUNT_VARIABLE, "")
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def trim_metrics(path: Path, last_epoch: int) -> None:
    """Keep the metrics lines of epochs 1..last_epoch (a resumed run rewrites the later ones)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        epoch = record.get("epoch") if isinstance(record, dict) else None
        if isinstance(epoch, int) and epoch <= last_epoch:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
