"""Training curves from the training module's ``metrics.jsonl`` (one JSON object per epoch, rank 0)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from .exceptions import MissingExtraError, NotFoundError
from .share import join

if TYPE_CHECKING:
    from .job import Job

METRICS_FILE = "metrics.jsonl"


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


def plot_metrics(job: Job, path: str | None = None) -> Any:
    """A matplotlib Figure: loss and accuracy per epoch, training and validation (shows inline in Jupyter);
    the epoch axis has whole-number ticks only."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "notebook") from exc
    records = read_records(job, path)
    fig = Figure(figsize=(10, 4), layout="constrained")
    loss_ax, acc_ax = fig.subplots(1, 2)
    epochs = [r.get("epoch") for r in records]
    for ax, key, title in ((loss_ax, "loss", "Loss"), (acc_ax, "accuracy", "Accuracy")):
        for prefix, label in (("", "training"), ("val_", "validation")):
            values = [r.get(prefix + key) for r in records]
            if any(v is not None for v in values):
                ax.plot(epochs, values, marker="o", label=label)
        ax.set_title(f"{title} — {job.name}")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epoch 2, not 1.75, 2.0, 2.25
        ax.grid(alpha=0.3)
        ax.legend()
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
