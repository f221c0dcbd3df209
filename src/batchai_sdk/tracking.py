"""``log_metric`` and ``log_params`` for training scripts: JSON files the SDK's tables and plots read.

Standard library only and importing nothing else of batchai_sdk, so a script on a node where only this file
is present can use it (copy it next to the script, or ``from batchai_sdk import log_metric`` where the SDK is
installed). The file contract is all there is to it (docs/training.md), so any language can write it too:

* ``$AZ_BATCHAI_STDOUTERR_DIR/metrics.jsonl``: one JSON object per line, appended; numeric values are metrics,
  ``epoch`` or ``step`` the x axis, ``time`` seconds since the epoch. The shipped training modules write
  the same shape next to ``--dir``.
  In a job, ``attempt`` is the ``AZ_BATCHAI_JOB_RESTART_COUNT`` that wrote the line: the SDK reads every
  attempt's lines as one run (a step logged again by a later attempt replaces the earlier one).
* ``$AZ_BATCHAI_STDOUTERR_DIR/params.json``: one JSON object, the run's hyperparameters.

Only rank 0 writes (the rank is read from Open MPI's, torchrun's, Horovod's or Slurm's variables), so a
2-node job logs each step once. Outside a job (no ``AZ_BATCHAI_STDOUTERR_DIR``) the files go to the current
directory, where the script can be tried before it is submitted.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["METRICS_FILE", "PARAMS_FILE", "log_metric", "log_params", "rank"]

METRICS_FILE = "metrics.jsonl"
PARAMS_FILE = "params.json"
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "RANK", "PMI_RANK", "SLURM_PROCID")


def rank() -> int:
    """This process's global rank in a distributed job (0 when it is not one)."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


_flight_tried = False


def _watch_flight() -> None:
    """A stepping PyTorch rank answers the hang watchdog's flight-recorder reads (``batchai_sdk._flight``;
    only in a job whose recorder is on, and only where the SDK is installed, not this file alone)."""
    global _flight_tried
    if _flight_tried or not os.environ.get("TORCH_FR_BUFFER_SIZE"):
        return
    _flight_tried = True
    try:
        from batchai_sdk import _flight  # this file may be used alone
    except ImportError:
        return
    _flight.start_watch(rank())


def _folder(directory: str | os.PathLike[str] | None) -> Path:
    if directory is not None:
        return Path(directory)
    return Path(os.environ.get("AZ_BATCHAI_STDOUTERR_DIR") or ".")


def _number(name: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"metric {name!r}: expected a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"metric {name!r}: expected a finite number, got {value!r}")
    return value


def log_metric(
    step: int | None = None,
    *,
    directory: str | os.PathLike[str] | None = None,
    all_ranks: bool = False,
    **metrics: float,
) -> Path | None:
    """Append one line ``{"step": step, "time": ..., "attempt": ..., **metrics}`` to ``metrics.jsonl``;
    returns its path (None on ranks other than 0 unless ``all_ranks``).

    ``log_metric(epoch, loss=0.31, val_accuracy=0.95)`` — any names, numbers only. ``step`` is the x axis
    of ``Job.plot_metrics()`` (the line number when None)."""
    if not metrics:
        raise ValueError("log_metric needs at least one metric, e.g. log_metric(1, loss=0.5)")
    record: dict[str, Any] = {}
    if step is not None:
        record["step"] = _number("step", step)
    record["time"] = round(time.time(), 3)
    restart = os.environ.get("AZ_BATCHAI_JOB_RESTART_COUNT", "").strip()
    if restart.isdigit():  # which attempt of a requeued job wrote it: the SDK joins attempts into one run
        record["attempt"] = int(restart)
    for name, value in metrics.items():
        record[name] = _number(name, value)
    _watch_flight()
    if rank() != 0 and not all_ranks:
        return None
    path = _folder(directory) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)  # one write of one line: a reader never sees half of it on a local file system
    finally:
        os.close(fd)
    return path


def log_params(*, directory: str | os.PathLike[str] | None = None, **params: Any) -> Path | None:
    """Merge ``params`` (JSON values) into ``params.json``; returns its path (None on ranks other than 0).

    ``log_params(lr=0.01, batch_size=64, optimizer="adam")``: the columns of the experiment's table."""
    if rank() != 0:
        return None
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"log_params: values must be JSON (numbers, strings, lists): {exc}") from None
    path = _folder(directory) / PARAMS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = {}
    merged = {**(current if isinstance(current, dict) else {}), **params}
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".params-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1, sort_keys=True)
        os.replace(tmp, path)  # whole or not at all, even if the script is killed meanwhile
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
