"""HTML reprs for notebooks: a workspace, a cluster (state, node counts, idle time), a job (state, times,
last lines)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from .exceptions import BatchAIError

if TYPE_CHECKING:
    from .cluster import Cluster
    from .job import Job
    from .workspace import Workspace

_STATE_COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "terminated": "#6d4c41",
    "running": "#1565c0",
    "queued": "#757575",
    "steady": "#2e7d32",
    "resizing": "#ef6c00",
}


def duration(seconds: float | None) -> str:
    """A time span as a person says it: ``45s``, ``12m05s``, ``3h07m``, ``2d04h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _badge(state: str) -> str:
    colour = _STATE_COLOURS.get(state, "#555")
    return (
        f'<span style="background:{colour};color:white;border-radius:3px;padding:1px 6px">'
        f"{escape(state)}</span>"
    )


def _table(title: str, rows: list[tuple[str, str]]) -> str:
    body = "".join(
        f"<tr><th style='text-align:left'>{escape(k)}</th><td style='text-align:left'>{v}</td></tr>"
        for k, v in rows
    )
    return f"<div><strong>{title}</strong><table>{body}</table></div>"


def workspace_html(ws: Workspace) -> str:
    facts = ws.to_dict()
    rows = [(k, escape(str(v))) for k, v in facts.items()]
    rows.append(("experiments", escape(", ".join(e.name for e in ws.list_experiments()) or "none")))
    rows.append(("clusters", escape(", ".join(c.name for c in ws.list_clusters()) or "none")))
    return _table(f"Workspace {escape(ws.name)}", rows)


def cluster_html(cluster: Cluster) -> str:
    try:
        counts = cluster.node_counts
        state = _badge(cluster.state.value)
        idle = cluster.idle_seconds
    except BatchAIError as exc:  # a notebook repr must not raise
        return _table(f"Cluster {escape(cluster.name)}", [("error", escape(str(exc)))])
    rows = [
        ("state", state),
        ("vm size", escape(cluster.vm_size)),
        ("priority", escape(cluster.vm_priority)),
        ("target nodes", str(cluster.target_nodes)),
        (
            "nodes",
            " · ".join(
                f"{k} {getattr(counts, k)}" for k in ("idle", "running", "preparing", "leaving", "unusable")
            ),
        ),
        ("idle for", duration(idle)),  # "-" while a job runs or waits
    ]
    return _table(f"Cluster {escape(cluster.name)}", rows)


def job_html(job: Job, lines: int = 8) -> str:
    title = f"Job {escape(job.experiment.name)}/{escape(job.name)}"
    if not job.submitted:
        return _table(title, [("state", _badge("not submitted"))])
    try:
        st = job.status
        try:
            last = job.tail("stdout.txt", lines)
        except BatchAIError:
            last = []
    except BatchAIError as exc:
        return _table(title, [("error", escape(str(exc)))])
    rows = [
        ("state", _badge(st.state.value)),
        ("cluster", escape(job.spec.cluster)),
        ("nodes", str(job.spec.node_count)),
    ]
    for label, when in (("created", st.creation_time), ("started", st.start_time), ("ended", st.end_time)):
        if when:
            rows.append((label, when.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if st.exit_code is not None:
        rows.append(("exit code", str(st.exit_code)))
    if st.failure_reason:
        rows.append(("failure", escape(st.failure_reason)))
    if last:
        rows.append(("stdout.txt", "<pre style='margin:0'>" + escape("\n".join(last)) + "</pre>"))
    return _table(title, rows)
