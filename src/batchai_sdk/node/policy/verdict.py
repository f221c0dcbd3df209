"""The hang verdict: from every rank's stacks (``stacks-<node>.json``, node/job/stacks.py) one line that
names the rank that differs from the others (standard library only)::

    stuck at step 1,204: rank 1 on vm_1 is in train.py:67 (time.sleep(30)); ranks 0, 2, 3 wait in
    all_reduce at train.py:71

Each rank is placed by its main thread: the innermost frame of the user's code (not the standard library,
an installed package or the SDK) and, when that frame called into a library, the library function it
waits in. The odd ones out are, in order: the stopped ranks (SIGSTOP, a debugger); else the ranks running
their own code while the others wait in a library (a collective); else the one smallest group of ranks
at the same place when the others agree. Where nothing stands out, the line says where each group is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

__all__ = ["describe", "place", "rank_records", "verdict"]

# decorators and call plumbing between the user's line and the library function it called
_GENERIC = frozenset(
    {"wrapper", "inner", "wrapped", "_wrapper", "_fn", "__call__", "_call_impl", "_wrapped_call_impl",
     "decorate_context", "<lambda>"}
)  # fmt: skip


def rank_records(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The ranks' main processes from the nodes' ``stacks-<node>.json`` files (unreadable ones skipped;
    helper processes and processes without a rank left out), by rank."""
    found: dict[int, dict[str, Any]] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        for rec in doc.get("processes") or []:
            if isinstance(rec, dict) and isinstance(rec.get("rank"), int) and not rec.get("helper"):
                found.setdefault(rec["rank"], rec)
    return [found[r] for r in sorted(found)]


def place(rec: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, library function, where) of one rank: kind ``stopped``, ``user`` (in its own code),
    ``library`` (its code called a library that has not returned) or ``unknown`` (no stacks)."""
    threads = rec.get("threads") or []
    main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
    frames = (main.get("frames") or []) if main else []
    index = next((i for i, f in enumerate(frames) if f.get("user")), None)
    where, lib = "", ""
    if index is not None:
        f = frames[index]
        where = f"{os.path.basename(str(f.get('file')))}:{f.get('line')}"
        called = [str(g.get("func", "?")).rsplit(".", 1)[-1] for g in reversed(frames[:index])]
        lib = next((name for name in called if name not in _GENERIC), called[0] if called else "")
    elif frames:
        f = frames[0]
        lib = str(f.get("func", "?")).rsplit(".", 1)[-1]
        where = f"{os.path.basename(str(f.get('file')))}:{f.get('line')}"
    if rec.get("stopped"):
        return "stopped", lib, where
    if not frames:
        return "unknown", "", ""
    return ("library" if lib else "user"), lib, where


def _code(rec: dict[str, Any]) -> str:
    threads = rec.get("threads") or []
    for t in threads[:1]:
        for f in t.get("frames") or []:
            if f.get("user"):
                return str(f.get("code") or f.get("func") or "")
    return ""


def describe(rec: dict[str, Any], *, node: bool = True) -> str:
    """``rank 1 on vm_1 is in train.py:67 (time.sleep(30))`` and the like, for one rank."""
    kind, lib, where = place(rec)
    who = f"rank {rec.get('rank')}" + (f" on {rec.get('node')}" if node else "")
    if kind == "stopped":
        return f"{who} is stopped (SIGSTOP or a debugger)" + (f" at {where}" if where else "")
    if kind == "unknown":
        return f"{who} gave no stacks ({rec.get('error') or 'none'})"
    if kind == "user":
        code = _code(rec)
        return f"{who} is in {where}" + (f" ({code})" if code else "")
    return f"{who} waits in {lib} at {where}"


def _ranks(recs: list[dict[str, Any]]) -> str:
    nums = [str(r.get("rank")) for r in recs]
    return ("rank " if len(nums) == 1 else "ranks ") + ", ".join(nums)


def _group_text(recs: list[dict[str, Any]]) -> str:
    if len(recs) == 1:
        return describe(recs[0])
    kind, lib, where = place(recs[0])
    verb = {"user": f"are in {where}", "library": f"wait in {lib} at {where}"}.get(kind, "")
    if kind == "stopped":
        verb = "are stopped (SIGSTOP or a debugger)"
    if kind == "unknown":
        verb = "gave no stacks"
    return f"{_ranks(recs)} {verb}"


def verdict(
    records: list[dict[str, Any]],
    step: float | None = None,
    missing: Iterable[str] = (),
    blame: Iterable[int] = (),
) -> str:
    """One line naming the odd rank(s) out and where the others are; ``step``: the job's last step;
    ``missing``: nodes that gave no stacks; ``blame``: the ranks another witness (the flight recorder)
    names, for when the stacks alone single out none (two ranks in two different collectives)."""
    head = f"stuck at step {step:,g}" if step is not None else "stuck"
    gone = list(missing)
    tail = f"; no stacks from {', '.join(gone)}" if gone else ""
    if not records:
        return f"{head}: no rank's stacks could be read{tail}"
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault(place(rec), []).append(rec)
    kinds = {key[0] for key in groups}
    if "stopped" in kinds:
        odd = [k for k in groups if k[0] == "stopped"]
    elif "user" in kinds and "library" in kinds:
        odd = [k for k in groups if k[0] == "user"]
    else:
        sizes = sorted(len(v) for v in groups.values())
        small = [k for k, v in groups.items() if len(v) == sizes[0]]
        odd = small if len(groups) > 1 and len(small) == 1 and sizes[0] < sizes[1] else []
    picked = [r for r in records if r.get("rank") in set(blame)]
    if not odd and picked and len(picked) < len(records):
        others: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for rec in records:
            if rec not in picked:
                others.setdefault(place(rec), []).append(rec)
        rest = "; ".join(_group_text(v) for v in others.values())
        return f"{head}: " + "; ".join(describe(r) for r in picked) + f"; {rest}{tail}"
    if not odd:
        if len(groups) == 1:
            kind, lib, where = next(iter(groups))
            if kind == "library" and len(records) > 1:
                return f"{head}: all ranks wait in {lib} at {where}{tail}"
        return f"{head}: " + "; ".join(_group_text(v) for v in groups.values()) + tail
    blamed = "; ".join(describe(r) for k in odd for r in groups[k])
    rest = "; ".join(_group_text(v) for k, v in groups.items() if k not in odd)
    return f"{head}: {blamed}" + (f"; {rest}" if rest else "") + tail
