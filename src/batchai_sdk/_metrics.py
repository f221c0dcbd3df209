"""Metrics and hyperparameters of a job: ``metrics.jsonl`` (one JSON object per epoch or step, rank 0: the
shipped modules and ``batchai_sdk.log_metric`` write it) and ``params.json`` (``log_params``), read from the
share; plots and the final values of whatever numeric metrics exist."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

from .exceptions import BatchAIError, MissingExtraError, NotFoundError
from .share import join
from .tracking import METRICS_FILE, PARAMS_FILE

if TYPE_CHECKING:
    from .job import Job


def find_metrics(job: Job) -> str:
    """Share path of the job's metrics.jsonl: next to ``--dir``, else in its logs or output directories."""
    share = job.workspace.share
    candidates = [join(base, METRICS_FILE) for base in job.file_roots()]
    for path in candidates:
        if share.exists(path):
            return path
    raise NotFoundError("file", METRICS_FILE, f"job {job.name!r} (looked in {', '.join(candidates)})")


def read_records(job: Job, path: str | None = None) -> list[dict[str, Any]]:
    text = job.workspace.share.read_text(path or find_metrics(job))
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written right now
    return records


def load_metrics(job: Job, path: str | None = None) -> Any:
    records = read_records(job, path)
    try:
        import pandas as pd
    except ImportError:
        return records
    return pd.DataFrame.from_records(records)


X_AXIS_KEYS = ("epoch", "step")
_NOT_METRICS = frozenset({*X_AXIS_KEYS, "time", "rank"})


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def metric_names(records: list[dict[str, Any]]) -> list[str]:
    """Every numeric key of the records except the x axis and time, in first-seen order."""
    seen: dict[str, None] = {}
    for record in records:
        for key, value in record.items():
            if key not in _NOT_METRICS and _numeric(value):
                seen.setdefault(key, None)
    return list(seen)


def final_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """Each metric's last finite value (a metric logged at epoch 3 only keeps that value)."""
    final: dict[str, float] = {}
    for record in records:
        for key in metric_names([record]):
            final[key] = float(record[key])
    return final


def panels(names: list[str]) -> dict[str, list[str]]:
    """The plot's panels: ``loss`` with ``val_loss``, ``accuracy`` with ``val_accuracy``; any other metric
    alone. Panel name → metrics in it."""
    grouped: dict[str, list[str]] = {}
    for name in names:
        base = name[4:] if name.startswith("val_") and len(name) > 4 else name
        grouped.setdefault(base, []).append(name)
    return grouped


def job_params(job: Job) -> dict[str, Any]:
    """The job's hyperparameters: ``--name value`` pairs of its arguments, then ``params.json`` (what the
    script gave ``log_params``) over them."""
    params: dict[str, Any] = {}
    args = list(job.spec.args)
    for i, arg in enumerate(args):
        if arg.startswith("--") and len(arg) > 2:
            if "=" in arg:
                key, value = arg[2:].split("=", 1)
                params[key] = scalar(value)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                params[arg[2:]] = scalar(args[i + 1])
    share = job.workspace.share
    for base in job.file_roots():
        data = share.read_json_or_none(join(base, PARAMS_FILE))
        if isinstance(data, dict):
            params.update(data)
            break
    return {k: v for k, v in params.items() if k != "dir" and not str(v).startswith("$")}


def scalar(text: str) -> Any:
    """``"0.01"`` → 0.01, ``"64"`` → 64, anything else as it is."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def job_results(job: Job) -> dict[str, float]:
    """The job's final metrics (empty when it logged none yet)."""
    try:
        return final_metrics(read_records(job))
    except BatchAIError:
        return {}


def plot_metrics(job: Job, path: str | None = None) -> Any:
    """A matplotlib Figure: one panel per metric the job logged (``val_<name>`` drawn with ``<name>``),
    against ``epoch`` or ``step`` (whole-number ticks) or the record's number; shows inline in Jupyter."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "notebook") from exc
    records = read_records(job, path)
    groups = panels(metric_names(records))
    if not groups:
        raise NotFoundError("metric", "any", f"job {job.name!r}'s {METRICS_FILE} (no numeric values yet)")
    x_key = next((k for k in X_AXIS_KEYS if any(k in r for r in records)), None)
    fig = Figure(figsize=(5 * min(len(groups), 3), 4 * math.ceil(len(groups) / 3)), layout="constrained")
    axes = fig.subplots(math.ceil(len(groups) / 3), min(len(groups), 3), squeeze=False).flatten()
    for ax, (title, names) in zip(axes, groups.items(), strict=False):
        for name in names:
            points = [
                (r.get(x_key) if x_key else i + 1, r[name])
                for i, r in enumerate(records)
                if _numeric(r.get(name))
            ]
            label = "validation" if name.startswith("val_") else ("training" if len(names) > 1 else name)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        ax.set_title(f"{title} — {job.name}")
        ax.set_xlabel(x_key or "record")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epoch 2, not 1.75, 2.0, 2.25
        ax.grid(alpha=0.3)
        ax.legend()
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    _show_figures_inline()
    return fig


def _show_figures_inline() -> None:
    """In an IPython kernel, have returned Figures render as images even without ``%matplotlib inline``."""
    if "IPython" not in sys.modules:
        return
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and getattr(shell, "kernel", None) is not None:
        select_figure_formats(shell, {"png"})  # type: ignore[no-untyped-call]
