"""PyTorch's flight recorder, read out of a rank when the hang watchdog asks (the rank's side).

The launcher turns the recorder on for PyTorch jobs (``TORCH_FR_BUFFER_SIZE``, which the installed torch
reads for every backend it records, gloo included, where the job's environment does not set it). A rank
that reports steps (``log_metric``) starts one daemon thread here, ``batchai-flight-recorder``: when the
scheduler touches ``.flight-request`` in the job's logs folder (as it collects the stacks of a hung job),
the thread writes the rank's recorder (``torch._C._distributed_c10d._dump_fr_trace_json``) to
``flight-rank<N>.json`` beside it. A thread, not a signal handler: a rank stuck in a collective holds its
main thread in C++, where no Python signal handler runs. node/policy/flight.py reads the files.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path

__all__ = ["REQUEST", "dump", "file_name", "start_watch"]

REQUEST = ".flight-request"
POLL_S = 0.2
_started = False
_lock = threading.Lock()


def file_name(rank: int) -> str:
    return f"flight-rank{rank}.json"


def start_watch(rank: int) -> None:
    """Start the thread once per process, in a job (``AZ_BATCHAI_STDOUTERR_DIR``) whose recorder is on."""
    global _started
    folder = os.environ.get("AZ_BATCHAI_STDOUTERR_DIR")
    if not folder or os.environ.get("TORCH_FR_BUFFER_SIZE", "0").strip() in ("", "0"):
        return
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(
        target=_watch, args=(Path(folder), rank), name="batchai-flight-recorder", daemon=True
    ).start()


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _watch(folder: Path, rank: int) -> None:
    request = folder / REQUEST
    seen = _mtime(request)  # a request from before this process started is not for it
    while True:
        time.sleep(POLL_S)
        now = _mtime(request)
        if now is not None and now != seen:
            seen = now
            with contextlib.suppress(Exception):  # never disturb the job over a diagnosis
                dump(folder, rank)


def dump(folder: Path, rank: int) -> Path | None:
    """Write the recorder of this process's process groups to ``folder/flight-rank<rank>.json`` (whole, by
    a rename); None where torch.distributed is not in use."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    c10d = sys.modules.get("torch._C._distributed_c10d")
    read = getattr(c10d, "_dump_fr_trace_json", None)  # torch 2.6 and later (2.5: _dump_nccl_trace_json)
    if read is None:
        return None
    data = read(True, False)
    path = folder / file_name(rank)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_bytes(data if isinstance(data, bytes) else str(data).encode())
    os.replace(part, path)
    return path
