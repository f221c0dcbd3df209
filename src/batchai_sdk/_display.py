"""HTML reprs for notebooks: a workspace, a cluster (state, node counts, idle time), an experiment (its
jobs: state, duration, cost, hyperparameters and final metrics), a job (state, times, last lines; a failed
job's failure line and stderr)."""

from __future__ import annotations

import contextlib
import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._models import JobState
from .exceptions import BatchAIError

if TYPE_CHECKING:
    from ._models import JobStatus
    from .cluster import Cluster
    from .experiment import Experiment
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


def escape(text: str) -> str:
    """``html.escape``, imported on first use: its entity table is not needed to import batchai_sdk."""
    import html

    return html.escape(text)


def human_span(seconds: float | None) -> str:
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


# long lines (a traceback, a path) wrap inside the output area instead of widening it
_PRE = "<pre style='margin:0;white-space:pre-wrap;overflow-wrap:anywhere'>"
_CELL = "text-align:left;white-space:normal;overflow-wrap:anywhere"


def _pre(lines: list[str]) -> str:
    return _PRE + escape("\n".join(lines)) + "</pre>"


def _table(title: str, rows: list[tuple[str, str]]) -> str:
    body = "".join(
        f"<tr><th style='text-align:left'>{escape(k)}</th><td style='{_CELL}'>{v}</td></tr>" for k, v in rows
    )
    return f"<div><strong>{title}</strong><table>{body}</table></div>"


def workspace_html(ws: Workspace) -> str:
    """The workspace's facts, each once: its name in the title, its backend unless the name says it."""
    facts = ws.to_dict()
    kind = str(facts.pop("kind", ""))
    facts.pop("name", None)
    if facts.get("workspace") == ws.name:
        facts.pop("workspace")
    rows = [] if kind == ws.name else [("backend", escape(kind))]
    rows += [(k.replace("_", " "), escape(str(v))) for k, v in facts.items()]
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
        ("idle for", human_span(idle)),  # "-" while a job runs or waits
    ]
    try:
        queue = cluster.queue()
    except BatchAIError:
        queue = {}
    if queue:  # the waiting jobs, why and until when
        shown = [f"{escape(key)}: {escape(why.line())}" for key, why in list(queue.items())[:10]]
        rows.append((f"queue ({len(queue)})", "<br>".join(shown)))
    return _table(f"Cluster {escape(cluster.name)}", rows)


def job_seconds(st: JobStatus, now: datetime | None = None) -> float | None:
    """Seconds the job has run: start to end, or to ``now`` while it runs; None before it starts."""
    if st.start_time is None:
        return None
    end = _aware(st.end_time or now or datetime.now(timezone.utc))
    return max(0.0, (end - _aware(st.start_time)).total_seconds())


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def waiting_line(st: JobStatus, now: datetime | None = None) -> str:
    """The wait spinner's text: the state and how long the job itself has been in it (queued since it
    was created, running since it started), not how long this wait has lasted."""
    since = st.start_time if st.state is not JobState.QUEUED and st.start_time else st.creation_time
    if since is None:
        return str(st.state)
    now = now or datetime.now(timezone.utc)
    line = f"{st.state} for {format_duration(max(0.0, (now - _aware(since)).total_seconds()))}"
    return f"{line}: {st.pending.line(now)}" if st.state is JobState.QUEUED and st.pending else line


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def last_metric(job: Job, name: str = "val_accuracy") -> float | None:
    """The last epoch's ``name`` in the job's metrics.jsonl, or None (no file, no such metric yet)."""
    from ._metrics import read_records

    try:
        records = read_records(job)
    except BatchAIError:
        return None
    for record in reversed(records):
        value = record.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def failure_line(job: Job, st: JobStatus) -> str:
    """What ended a job that did not succeed, in the words of ``JobFailedError``."""
    return (
        f"job {job.name!r} {st.state.value} (exit code {st.exit_code}): "
        f"{st.failure_reason or 'no reason recorded'}"
    )


def result_row(job: Job) -> dict[str, Any]:
    """One job as a row of its experiment's table: name, state, duration, cost, then its hyperparameters
    and final metrics (whatever it has: ``_metrics.job_params`` / ``job_results``)."""
    from ._metrics import job_params, job_results

    row: dict[str, Any] = {"job": job.name}
    if not job.submitted:
        return {**row, "state": "not submitted"}
    st = job.status
    row.update(state=st.state.value, duration=format_duration(job_seconds(st)))
    cost = job.cost
    row["cost"] = "unknown" if cost is None else str(cost)
    row.update(job_params(job))
    row.update(job_results(job))
    return row


def result_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The union of the rows' keys in first-seen order (a job without a metric shows a dash there)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def format_cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):  # 0.9500 and 12.3400 line up; 1e-05 stays readable
        return f"{value:.4f}" if value == 0 or 0.001 <= abs(value) < 1e6 else f"{value:.4g}"
    return str(value)


def experiment_html(exp: Experiment) -> str:
    """The experiment's jobs, one row each: state, duration, cost, hyperparameters, final metrics."""
    title = f"Experiment {escape(exp.name)}"
    try:
        rows = exp.results(frame=False)
    except BatchAIError as exc:
        return _table(title, [("error", escape(str(exc)))])
    if not rows:
        return _table(title, [("jobs", "none")])
    columns = result_columns(rows)
    cells = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in columns)
    body = [f"<tr>{cells}</tr>"]
    for row in rows:
        tds = []
        for col in columns:
            value = row.get(col)
            shown = _badge(str(value)) if col == "state" else escape(format_cell(value))
            tds.append(f"<td style='{_CELL}'>{shown}</td>" if col == "job" else f"<td>{shown}</td>")
        body.append(f"<tr>{''.join(tds)}</tr>")
    return f"<div><strong>{title}</strong><table>{''.join(body)}</table></div>"


def job_html(job: Job, lines: int = 8) -> str:
    title = f"Job {escape(job.experiment.name)}/{escape(job.name)}"
    if not job.submitted:
        return _table(title, [("state", _badge("not submitted"))])
    try:
        st = job.status
        last = _tail(job, "stdout.txt", lines)
        failed = st.state.ended and st.state is not JobState.SUCCEEDED
        errors = script_lines(_tail(job, "stderr.txt", lines + 60))[-lines:] if failed else []
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
    if st.start_time:
        rows.append(("duration", format_duration(job_seconds(st))))
    if st.exit_code is not None:
        rows.append(("exit code", str(st.exit_code)))
    if failed:
        line = escape(failure_line(job, st))
        rows.append(("failure", f"<span style='color:{_STATE_COLOURS['failed']}'>{line}</span>"))
    elif st.failure_reason:  # an earlier attempt's, while the job is retried
        rows.append(("failure", escape(st.failure_reason)))
    if st.pending is not None:  # queued: why it waits, and until when
        rows.append(("waiting", escape(st.pending.line())))
    if st.notice:  # observe mode: silent for a while, possibly hung
        rows.append(
            ("notice", f"<span style='color:{_STATE_COLOURS['resizing']}'>{escape(st.notice)}</span>")
        )
    if st.start_time:
        with contextlib.suppress(BatchAIError):
            found = job.goodput
            if found.goodput is not None:
                rows.append(("goodput", escape(found.summary())))
    if last:
        rows.append(("stdout.txt", _pre(last)))
    if errors:
        rows.append(("stderr.txt", _pre(errors)))
    return _table(title, rows)


MPI_RULE = "-" * 74  # Open MPI frames each of its help messages with this line


def script_lines(lines: list[str]) -> list[str]:
    """A stderr tail without Open MPI's framed messages ("mpirun detected that one or more processes
    exited with non-zero status..."): the failure line says that already, the script's own lines matter."""
    kept: list[str] = []
    inside = False
    for line in lines:
        if line.strip() == MPI_RULE:
            inside = not inside
            continue
        if not inside:
            kept.append(line)
    return kept


def _tail(job: Job, name: str, lines: int) -> list[str]:
    try:
        return job.tail(name, lines)
    except BatchAIError:
        return []
