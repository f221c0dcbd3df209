"""How ``batchai`` prints a result, as az does: ``--output json|jsonc|table|tsv|none`` and ``--query``.

``--query`` (JMESPath) applies first; a command's own table layout (the tutorial's columns) is used only
without ``--query``, otherwise the table shows the query's result generically — az's rules. Tables are az's
plain style: a header, a line of dashes, the rows; numbers right-aligned; two spaces between columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jmespath
import jmespath.exceptions

from .._display import human_span
from .._models import FileInfo
from ..node.policy.watchdog import verdict_of

if TYPE_CHECKING:
    from ..cluster import Cluster
    from ..experiment import Experiment
    from ..job import Job
    from ..workspace import Workspace

OUTPUT_FORMATS = ("json", "jsonc", "table", "tsv", "none")

Row = dict[str, Any]
TableLayout = Callable[[Any], list[Row]]


def compile_query(text: str) -> Any:
    """A compiled JMESPath expression; ValueError with JMESPath's reason when it does not parse."""
    try:
        return jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as exc:
        # jmespath's messages span lines (the query with a caret under the position): keep one line
        reason = getattr(exc, "msg", None) or str(exc).splitlines()[0]
        position = getattr(exc, "lex_position", None)
        where = f" at position {position}" if isinstance(position, int) else ""
        raise ValueError(f"invalid JMESPath query {text!r}: {reason}{where}") from None


def render(result: Any, *, output: str, query: Any = None, table: TableLayout | None = None) -> str | None:
    """The text to print for ``result`` (None: print nothing)."""
    if query is not None:
        result = query.search(result)
    if output == "none":
        return None
    if output in ("json", "jsonc"):
        return json.dumps(result, indent=2, ensure_ascii=False, default=_json_default)
    if output == "tsv":
        return format_tsv(result)
    rows = table(result) if table is not None and query is None else generic_rows(result)
    return format_table(rows)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """az's table style; columns are the keys of the rows in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    if not columns:
        return ""
    numeric = {
        c: all(_is_number(r.get(c)) or r.get(c) is None for r in rows)
        and any(_is_number(r.get(c)) for r in rows)
        for c in columns
    }
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c) + 2, *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if numeric[c] else v.ljust(w) for v, w, c in zip(values, widths, columns, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out.extend(line(values) for values in cells)
    return "\n".join(out)


def _title(key: str) -> str:
    return key[:1].upper() + key[1:]


def _scalar_fields(item: Mapping[str, Any]) -> Row:
    return {_title(str(k)): v for k, v in item.items() if not isinstance(v, (Mapping, list, tuple))}


def generic_rows(result: Any) -> list[Row]:
    """az's table for results without a layout: the scalar fields of each object, or the values."""
    if result is None:
        return []
    items = result if isinstance(result, list) else [result]
    rows: list[Row] = []
    for item in items:
        if isinstance(item, Mapping):
            rows.append(_scalar_fields(item))
        elif isinstance(item, (list, tuple)):
            rows.append(
                {f"Column{i + 1}": v for i, v in enumerate(item) if not isinstance(v, (Mapping, list))}
            )
        else:
            rows.append({"Result": item})
    return rows


def _tsv_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ""
    if isinstance(value, (list, tuple)):
        return str(len(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _tsv_row(item: Any) -> str:
    if isinstance(item, Mapping):
        return "\t".join(_tsv_value(v) for v in item.values())
    if isinstance(item, (list, tuple)):
        return "\t".join(_tsv_value(v) for v in item)
    return _tsv_value(item)


def format_tsv(result: Any) -> str | None:
    """az's tsv: one line per list item, values tab-separated in field order; nested objects are blank,
    nested lists give their length. Scalars print bare, which is what ``-o tsv --query x`` is for."""
    if result is None:
        return None
    items = result if isinstance(result, list) else [result]
    return "\n".join(_tsv_row(item) for item in items)


# views (the JSON each command prints) and table layouts (the tutorial's columns)


def _items(result: Any) -> list[dict[str, Any]]:
    items = result if isinstance(result, list) else [result]
    return [i for i in items if isinstance(i, dict)]


def cluster_view(cluster: Cluster, group: str) -> dict[str, Any]:
    data = cluster.to_dict()
    return {"name": data.pop("name"), "resourceGroup": group or None, **data}


def cluster_table(result: Any) -> list[Row]:
    rows = []
    for c in _items(result):
        counts = c.get("nodeStateCounts") or {}
        rows.append(
            {
                "Name": c.get("name"),
                "Resource Group": c.get("resourceGroup"),
                "Workspace": c.get("workspace"),
                "VM Size": c.get("vmSize"),
                "State": c.get("allocationState"),
                "Idle": counts.get("idleNodeCount"),
                "Running": counts.get("runningNodeCount"),
                "Preparing": counts.get("preparingNodeCount"),
                "Leaving": counts.get("leavingNodeCount"),
                "Unusable": counts.get("unusableNodeCount"),
            }
        )
    return rows


def cluster_list_table(result: Any) -> list[Row]:
    """``cluster list``: the tutorial's cluster columns, then the nodes up and how long the cluster has
    had no job running or queued ("-" while it has one) — is this cluster forgotten?"""
    rows = cluster_table(result)
    for row, c in zip(rows, _items(result), strict=True):
        row["Nodes"] = c.get("currentNodeCount")
        row["Idle For"] = human_span(c.get("idleSeconds"))
    return rows


def health_table(result: Any) -> list[Row]:
    """``cluster check``: a row per check, failures first."""
    checks = sorted(result.get("checks") or [], key=lambda c: (bool(c.get("ok")), str(c.get("node"))))
    return [
        {
            "Node": c.get("node"),
            "Check": c.get("check"),
            "Result": "OK" if c.get("ok") else "FAIL",
            "Detail": c.get("detail"),
        }
        for c in checks
    ]


def job_view(job: Job, group: str) -> dict[str, Any]:
    data = job.to_dict()
    # where Batch AI put the job's folder (its logs and outputs): here, its folder on the workspace share
    data.setdefault("jobOutputDirectoryPathSegment", job.paths.job_dir)
    return {"name": data.pop("name"), "resourceGroup": group or None, "workspace": job.workspace.name, **data}


def job_table(result: Any) -> list[Row]:
    items = _items(result)
    rows: list[Row] = [
        {
            "Name": j.get("name"),
            "Resource Group": j.get("resourceGroup"),
            "Cluster": j.get("cluster"),
            "Cluster RG": j.get("resourceGroup"),
            "Nodes": j.get("nodeCount"),
            "State": j.get("executionState"),
            "Exit code": j.get("exitCode"),
            "Waiting for": _waiting_cell(j.get("pending")),
        }
        for j in items
    ]
    if any(j.get("notice") for j in items):  # a job possibly hung: the verdict, which rank and where
        for row, j in zip(rows, items, strict=True):
            row["Notice"] = verdict_of(j.get("notice")) or j.get("notice") or ""
    return rows


def _waiting_cell(pending: Any) -> str | None:
    """``waiting_for_nodes #2, ~15:51:33``: a queued job's reason, place and estimated start (UTC)."""
    if not isinstance(pending, dict) or not pending.get("kind"):
        return None
    cell = str(pending["kind"]) + (f" #{pending['position']}" if pending.get("position") else "")
    start = pending.get("estimatedStart")
    if isinstance(start, str) and "T" in start:
        cell += f", ~{start.split('T', 1)[1][:8]}"
    return cell


def file_view(info: FileInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "type": info.type,
        "size": info.size,
        "modified": info.modified.replace(microsecond=0).isoformat() if info.modified else None,
    }


def file_table(result: Any) -> list[Row]:
    return [
        {"Name": f.get("name"), "Type": f.get("type"), "Size": f.get("size"), "Modified": f.get("modified")}
        for f in _items(result)
    ]


def experiment_view(exp: Experiment, group: str) -> dict[str, Any]:
    data = exp.to_dict()
    return {"name": data.pop("name"), "resourceGroup": group or None, **data}


def experiment_table(result: Any) -> list[Row]:
    return [
        {"Name": e.get("name"), "Resource Group": e.get("resourceGroup"), "Workspace": e.get("workspace")}
        for e in _items(result)
    ]


def workspace_view(ws: Workspace, group: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    details = {k: v for k, v in ws.to_dict().items() if k not in ("name", "kind", "workspace")}
    return {
        "name": ws.name,
        "resourceGroup": group["name"],
        "location": entry.get("options", {}).get("location") or group.get("location"),
        "backend": entry.get("backend"),
        "provisioningState": "succeeded",
        "creationTime": entry.get("created"),
        **details,
    }


def workspace_table(result: Any) -> list[Row]:
    return [
        {
            "Name": w.get("name"),
            "Resource Group": w.get("resourceGroup"),
            "Location": w.get("location"),
            "Backend": w.get("backend"),
        }
        for w in _items(result)
    ]


def group_view(group: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": group["name"],
        "location": group.get("location"),
        "properties": {"provisioningState": "Succeeded"},
        "workspaces": sorted(group.get("workspaces", {})),
        "storageAccounts": sorted(group.get("storageAccounts", {})),
    }


def group_table(result: Any) -> list[Row]:
    return [
        {"Name": g.get("name"), "Location": g.get("location"), "Status": "Succeeded"} for g in _items(result)
    ]


def account_view(group: dict[str, Any], account: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": account["name"],
        "resourceGroup": group["name"],
        "location": account.get("location"),
        "sku": {"name": account.get("sku")},
        "kind": account.get("kind"),
        "provisioningState": "Succeeded",
        "primaryEndpoints": {"file": f"https://{account['name']}.file.core.windows.net/"},
        "shares": dict(account.get("shares", {})),
    }


def account_table(result: Any) -> list[Row]:
    return [
        {
            "Name": a.get("name"),
            "Resource Group": a.get("resourceGroup"),
            "Location": a.get("location"),
            "Sku": (a.get("sku") or {}).get("name"),
        }
        for a in _items(result)
    ]


def metrics_table(result: Any) -> list[Row]:
    """``batchai job metrics -o table``: one row per record, the columns every record has (time left out)."""
    from .._display import format_cell, result_columns

    rows = _items(result)
    columns = [c for c in result_columns(rows) if c != "time"]
    return [{c: format_cell(r.get(c)) for c in columns} for r in rows]
