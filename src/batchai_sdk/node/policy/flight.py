"""PyTorch's flight recorder in the hang verdict (the scheduler's side; standard library only).

When the hang watchdog collects a job's stacks it also touches ``.flight-request`` in the job's logs folder;
each stepping PyTorch rank's ``batchai-flight-recorder`` thread (batchai_sdk/_flight.py) answers with its
recorder in ``flight-rank<N>.json``. ``summary`` compares the ranks' last collectives::

    flight recorder: rank 0 at collective #6 all_reduce, rank 1 at #6 barrier

and names the odd ranks out: those behind the others (a lower collective number: they never reached the
collective the others wait in), else, where all are at the same number but in different operations, those
whose operation is not the one every rank ran before (the rank that skipped or swapped a collective).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any

__all__ = ["BUFFER_SIZE", "BUFFER_VARIABLE", "REQUEST", "read", "request", "summary"]

REQUEST = ".flight-request"  # batchai_sdk._flight.REQUEST
BUFFER_VARIABLE = "TORCH_FR_BUFFER_SIZE"  # read by torch 2.6+ for every backend it records (gloo too)
BUFFER_SIZE = "2000"  # what PyTorch jobs get unless their environment sets it (launch.py, exported to ranks)
_FILE = re.compile(r"^flight-rank(\d+)\.json$")


def request(folder: str) -> float | None:
    """Ask the job's ranks for their recorders; returns the request's time on the share's clock."""
    path = os.path.join(folder, REQUEST)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write("flight recorder requested by the hang watchdog\n")
        return os.stat(path).st_mtime
    except OSError:
        return None


def read(folder: str, since: float | None) -> dict[int, list[dict[str, Any]]]:
    """Each rank's recorded collectives (``flight-rank<N>.json`` written since ``since``), by rank."""
    found: dict[int, list[dict[str, Any]]] = {}
    if since is None:
        return found
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        match = _FILE.match(name)
        if not match:
            continue
        path = os.path.join(folder, name)
        try:
            if os.stat(path).st_mtime < since:
                continue  # an earlier hang's
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if isinstance(entries, list):
            found[int(match.group(1))] = [e for e in entries if isinstance(e, dict) and not e.get("is_p2p")]
    return found


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name") or "?").rsplit(":", 1)[-1]


def _seq(entry: dict[str, Any]) -> int:
    value = entry.get("collective_seq_id")
    return value if isinstance(value, int) else -1


def summary(recorders: dict[int, list[dict[str, Any]]]) -> tuple[str, list[int]]:
    """One clause comparing the ranks' last collectives, and the ranks that differ ([] where none does)."""
    last = {rank: max(entries, key=_seq) for rank, entries in sorted(recorders.items()) if entries}
    if not last:
        return "", []
    parts = [f"rank {r} at collective #{_seq(e)} {_op(e)}" for r, e in last.items()]
    text = "flight recorder: " + ", ".join(parts)
    if len(last) < 2:
        return text, []
    seqs = {r: _seq(e) for r, e in last.items()}
    if len(set(seqs.values())) > 1:
        low = min(seqs.values())
        return text, [r for r, s in seqs.items() if s == low]
    ops = {r: _op(e) for r, e in last.items()}
    if len(set(ops.values())) == 1:
        return text, []
    current = next(iter(seqs.values()))
    before = Counter(_op(e) for entries in recorders.values() for e in entries if _seq(e) < current)
    usual = [r for r, op in ops.items() if before[op]]
    odd = [r for r in ops if r not in usual]
    return text, odd if usual and odd else []
