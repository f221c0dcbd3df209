"""Rows of ``sched.db`` no code path can work with (a value an older scheduler or a bug let in) are moved
to the ``quarantine`` table with the reason, instead of failing the loop on every pass and every restart.
The job itself ends ``failed`` with that reason (its record on the share says so), and its name is free.
A job that was running is fenced as after a lost database: its row becomes ``cleaning`` with its tag and
nodes (every node, when the row does not say which), so its nodes are held until every process with its
tag is found and ended; only then does it end ``failed`` and its nodes take other jobs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..policy import retries
from ..protocol.fields import NODE_ID
from ..protocol.names import NAME
from .api import check_row
from .log import log
from .store import Failed, Fenced, Store


def quarantine_bad_rows(store: Store, all_nodes: Sequence[str] = ()) -> int:
    """Move every row ``check_row`` refuses to the quarantine; returns how many. ``all_nodes``: the
    cluster's nodes, held for a running job whose row does not say which nodes it has."""
    moved = 0
    for row in store.jobs():
        reason = check_row({k: row[k] for k in row.keys()})  # noqa: SIM118 - sqlite3.Row iterates over values
        if reason is not None:
            quarantine(store, row, reason, all_nodes)
            moved += 1
    return moved


def _nodes(value: object, all_nodes: Sequence[str]) -> list[str]:
    try:
        nodes = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        nodes = None
    if isinstance(nodes, list) and nodes and all(isinstance(n, str) and NODE_ID.match(n) for n in nodes):
        return nodes
    return list(all_nodes)


def quarantine(store: Store, row: sqlite3.Row, reason: str, all_nodes: Sequence[str] = ()) -> None:
    """Keep the row as it was (JSON) with ``reason``; what readers see becomes a failed job (a running
    one once its processes are ended: fenced, ``cleaning`` until then)."""
    data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row iterates over values
    tag = data.get("tag")
    running = data.get("state") in ("running", "cleaning") and isinstance(tag, str) and tag
    exp, name = data.get("experiment"), data.get("name")
    valid = isinstance(exp, str) and isinstance(name, str) and NAME.match(exp) and NAME.match(name)
    created = data.get("creation_time") if isinstance(data.get("creation_time"), str) else None
    replacement: Failed | Fenced | None = None
    if running:  # its processes may run on: fenced, its nodes held until they are ended
        why = (
            f"the scheduler quarantined the job's record ({reason}); every process of the job was ended"
            " before its nodes were used again; submit it again"
        )
        replacement = Fenced(
            experiment=str(exp) if valid else "quarantined",
            name=str(name) if valid else f"job-{data.get('id')}",
            tag=tag,
            nodes=_nodes(data.get("nodes"), all_nodes),
            cause=retries.EndCause.EXIT.value,
            detail=why,
            creation_time=created,
            start_time=data.get("start_time") if isinstance(data.get("start_time"), str) else None,
            started=0.0,
        )
    elif valid:
        replacement = Failed(
            experiment=str(exp),
            name=str(name),
            reason=f"the scheduler quarantined the job's record ({reason}); submit it again",
            creation_time=created,
        )
    store.quarantine(row, reason, replacement)
    log(f"quarantined job row {data.get('id')}: {reason}")
