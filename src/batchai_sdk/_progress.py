"""Progress display (rich) for uploads, downloads, cluster provisioning and waiting on jobs.

Shown only on a terminal unless asked for (``show=True``); ``show=False`` or ``BATCHAI_PROGRESS=0``
turns it off everywhere. Notebooks get none by default: rich's live display there needs ipywidgets and
leaves empty output areas behind.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def enabled(show: bool | None) -> bool:
    if show is not None:
        return show
    if os.environ.get("BATCHAI_PROGRESS", "").lower() in ("0", "false", "no", "off"):
        return False
    return sys.stderr.isatty()


@contextmanager
def transfer(total: int, label: str, show: bool | None) -> Iterator[Callable[[int], None] | None]:
    """A bytes progress bar; yields the callback to call with each chunk's size (None when off)."""
    if not enabled(show):
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def status(label: str, show: bool | None) -> Iterator[Callable[[str], None]]:
    """A spinner with a changing line of text (cluster provisioning, waiting on a job)."""
    if not enabled(show):
        yield lambda _text: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(label) as spinner:

        def update(text: str) -> None:
            spinner.update(f"{label}: {text}")

        yield update


def chain(*callbacks: Any) -> Callable[[int], None] | None:
    live = [c for c in callbacks if c is not None]
    if not live:
        return None

    def both(n: int) -> None:
        for callback in live:
            callback(n)

    return both
