"""Metrics and hyperparameters of a job: ``metrics.jsonl`` (one JSON object per epoch or step, rank 0: the
shipped modules and ``batchai_sdk.log_metric`` write it) and ``params.json`` (``log_params``), read from the
share; plots and the final values of whatever numeric metrics exist."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from .exceptions import BatchAIError, MissingExtraError, NotFoundError
from .share import join
from .tracking import METRICS_FILE, PARAMS_FILE

if TYPE_CHECKING:
    from .job import Job

X_AXIS_KEYS = ("epoch", "step")
X_AXIS_KEYS_BY_PRIORITY = ("step", "epoch")
ATTEMPT_KEY = "attempt"
_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")
_NOT_METRICS = frozenset({*X_AXIS_KEYS, "time", "rank", ATTEMPT_KEY})


def find_metrics(job: Job) -> str:
    """Share path of the job's current metrics.jsonl: next to ``--dir``, else in its logs or output
    directories."""
    share = job.workspace.share
    candidates = [join(base, METRICS_FILE) for base in job.file_roots()]
    for path in candidates:
        if share.exists(path):
            return path
    raise NotFoundError("file", METRICS_FILE, f"job {job.name!r} (looked in {', '.join(candidates)})")


def metric_files(job: Job) -> list[tuple[int | None, str]]:
    """(attempt, share path) of each metrics.jsonl of the job, oldest first: every archived attempt's
    (``stdouterr/attempt-<n>/``, attempt ``n - 1``), then the current file (``find_metrics``; its attempt is
    the one after the archived ones when it is in the logs, unknown elsewhere). Empty before the first
    record."""
    share = job.workspace.share
    found: list[tuple[int | None, str]] = []
    try:
        entries = share.list(job.paths.stdouterr)
    except NotFoundError:
        entries = []
    for entry in entries:
        match = _ATTEMPT_DIR.match(entry.name)
        path = join(job.paths.stdouterr, entry.name, METRICS_FILE)
        if entry.is_dir and match and share.exists(path):
            found.append((int(match.group(1)) - 1, path))
    found.sort()
    try:
        current = find_metrics(job)
    except NotFoundError:
        return found
    in_logs = current == join(job.paths.stdouterr, METRICS_FILE)
    archived = max((a for a, _ in found if a is not None), default=-1)
    found.append((archived + 1 if in_logs else None, current))
    return found


def _parse(text: str, attempt: int | None) -> list[dict[str, Any]]:
    records = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written right now
        if not isinstance(record, dict):
            continue
        if attempt is not None and not _whole(record.get(ATTEMPT_KEY)):
            record[ATTEMPT_KEY] = attempt
        records.append(record)
    return records


def read_records(job: Job, path: str | None = None) -> list[dict[str, Any]]:
    """The job's records as one run: every attempt's, oldest first, each tagged with its ``attempt``
    (0-based, the ``AZ_BATCHAI_JOB_RESTART_COUNT`` it ran with) where known, and the steps a resumed attempt
    logged again replacing the earlier attempts' (``one_series``). ``path``: that one file only (a
    ``NotFoundError`` when it is missing). Empty before the first record."""
    share = job.workspace.share
    if path is not None:
        return _parse(share.read_text(path), None)
    records: list[dict[str, Any]] = []
    for attempt, source in metric_files(job):
        try:
            records += _parse(share.read_text(source), attempt)
        except NotFoundError:
            continue  # archived between the listing and the read: the next read has it
    return one_series(records)


def one_series(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records of several attempts as one series: a step (``step``, else ``epoch``) that a later attempt
    logged again keeps only that attempt's records (last write wins per step); records of one attempt
    at the same step all stay (``loss`` and ``val_loss`` logged apart)."""
    latest: dict[tuple[str, Any], int] = {}
    for record in records:
        key = x_of(record)
        attempt = record.get(ATTEMPT_KEY)
        if key is not None and _whole(attempt):
            latest[key] = max(latest.get(key, 0), attempt)
    kept = []
    for record in records:
        key = x_of(record)
        attempt = record.get(ATTEMPT_KEY)
        if key is not None and _whole(attempt) and attempt < latest[key]:
            continue
        kept.append(record)
    return kept


def x_of(record: Mapping[str, Any]) -> tuple[str, Any] | None:
    """The record's x: ``("step", n)`` when it has a ``step``, else ``("epoch", n)``, else None."""
    for key in X_AXIS_KEYS_BY_PRIORITY:
        if _numeric(record.get(key)):
            return key, record[key]
    return None


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def load_metrics(job: Job, path: str | None = None) -> Any:
    """``Job.metrics()``: the records as a DataFrame when pandas is installed, else a list; empty (no
    error) before the first record."""
    return as_table(read_records(job, path))


def as_table(rows: list[dict[str, Any]]) -> Any:
    """Rows as a pandas DataFrame when pandas is installed, else the list itself."""
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame.from_records(rows)


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


def _figure_parts() -> tuple[Any, Any]:
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "notebook") from exc
    return Figure, MaxNLocator


def _grid(count: int) -> tuple[Any, list[Any]]:
    """A Figure of ``count`` panels, three a row (the spare ones hidden)."""
    figure, _ = _figure_parts()
    fig = figure(figsize=(5 * min(count, 3), 4 * math.ceil(count / 3)), layout="constrained")
    axes = list(fig.subplots(math.ceil(count / 3), min(count, 3), squeeze=False).flatten())
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def series(records: list[dict[str, Any]], name: str) -> tuple[str, list[Any], list[float], list[Any]]:
    """One metric's points on its own x: (x label, xs, ys, each point's attempt). The x is ``step`` or
    ``epoch`` when every record of the metric has the same one of them (as the script logged it), else
    the record's number among them."""
    points = [r for r in records if _numeric(r.get(name))]
    keys = {k[0] if (k := x_of(r)) else None for r in points}
    key = keys.pop() if len(keys) == 1 else None
    xs = [r[key] for r in points] if key else list(range(1, len(points) + 1))
    return key or "record", xs, [float(r[name]) for r in points], [r.get(ATTEMPT_KEY) for r in points]


def _mark_attempts(ax: Any, xs: list[Any], attempts: list[Any]) -> None:
    """A dashed line where each later attempt's points begin, labelled ``restart N``."""
    for i in range(1, len(xs)):
        if attempts[i] != attempts[i - 1] and _whole(attempts[i]):
            ax.axvline(xs[i], color="grey", linestyle="--", linewidth=1, label=f"restart {attempts[i]}")


def _finish(ax: Any, title: str, xlabels: list[str]) -> None:
    _, max_n_locator = _figure_parts()
    ax.set_title(title)
    ax.set_xlabel(" / ".join(dict.fromkeys(xlabels)) or "record")
    ax.xaxis.set_major_locator(max_n_locator(integer=True))  # epoch 2, not 1.75, 2.0, 2.25
    ax.grid(alpha=0.3)
    ax.legend()


def plot_metrics(job: Job, path: str | None = None) -> Any:
    """A matplotlib Figure: one panel per metric the job logged (``val_<name>`` drawn with ``<name>``),
    each series against its own ``step`` or ``epoch`` (whole-number ticks), as logged, else the record's
    number; a dashed line where a requeued job's next attempt begins. Shows inline in Jupyter."""
    _figure_parts()
    records = read_records(job, path)
    groups = panels(metric_names(records))
    if not groups:
        where = path or ", ".join(join(base, METRICS_FILE) for base in job.file_roots())
        raise NotFoundError("metric", "any", f"job {job.name!r} (no numeric values yet in {where})")
    fig, axes = _grid(len(groups))
    for ax, (title, names) in zip(axes, groups.items(), strict=True):
        xlabels = []
        for i, name in enumerate(names):
            xlabel, xs, ys, attempts = series(records, name)
            label = "validation" if name.startswith("val_") else ("training" if len(names) > 1 else name)
            ax.plot(xs, ys, marker="o", label=label)
            xlabels.append(xlabel)
            if i == 0:
                _mark_attempts(ax, xs, attempts)
        _finish(ax, f"{title} — {job.name}", xlabels)
    _show_figures_inline()
    return fig


def plot_trials(title: str, trials: Mapping[str, list[dict[str, Any]]], metrics: list[str] | None) -> Any:
    """``Sweep.plot_metrics``: one panel per metric, one line per trial (label → its records)."""
    _figure_parts()
    names = metrics or metric_names([r for records in trials.values() for r in records])
    if not names:
        raise NotFoundError("metric", "any", f"{title} (no trial logged a numeric value yet)")
    fig, axes = _grid(len(names))
    for ax, name in zip(axes, names, strict=True):
        xlabels = []
        for label, records in trials.items():
            xlabel, xs, ys, _ = series(records, name)
            if xs:
                ax.plot(xs, ys, marker=".", label=label)
                xlabels.append(xlabel)
        _finish(ax, f"{name} — {title}", xlabels)
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
