"""Progress display for uploads, downloads, cluster provisioning and waiting on jobs.

On a terminal: rich's bars and spinners. In a Jupyter kernel: one HTML line (a ``<progress>`` bar or the
state), updated in place through IPython's ``display(..., display_id=True)`` — core Jupyter messages, no
ipywidgets needed (rich's live display would need them and leaves empty output areas behind); it ends
showing the outcome. Shown by default on a terminal and in a notebook; ``show=False`` or
``BATCHAI_PROGRESS=0`` turns it off, ``show=True`` forces it on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

UPDATE_EVERY = 0.25  # seconds between two updates of a notebook's line (each is a message to the browser)


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython with a kernel, not the terminal IPython)."""
    if "IPython" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def enabled(show: bool | None) -> bool:
    if show is not None:
        return show
    if os.environ.get("BATCHAI_PROGRESS", "").lower() in ("0", "false", "no", "off"):
        return False
    return sys.stderr.isatty() or in_notebook()


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class NotebookLine:
    """One output line of a notebook cell, replaced in place (``display_id``), at most every
    ``UPDATE_EVERY`` seconds except the last."""

    def __init__(self, text: str) -> None:
        from IPython.display import HTML, display

        self._html = HTML
        self._handle = display(HTML(self._line(text)), display_id=True)  # type: ignore[no-untyped-call]
        self._last = 0.0

    @staticmethod
    def _line(text: str, done: float | None = None, total: float | None = None) -> str:
        bar = ""
        if done is not None and total:
            bar = f"<progress value='{done:.0f}' max='{total:.0f}' style='width:16em'></progress> "
        import html

        return f"<div style='font-family:monospace'>{bar}{html.escape(text)}</div>"

    def update(
        self, text: str, done: float | None = None, total: float | None = None, *, force: bool = False
    ) -> None:
        now = time.monotonic()
        if not force and now - self._last < UPDATE_EVERY:
            return
        self._last = now
        if self._handle is not None:
            self._handle.update(self._html(self._line(text, done, total)))  # type: ignore[no-untyped-call]


@contextmanager
def transfer(total: int, label: str, show: bool | None) -> Iterator[Callable[[int], None] | None]:
    """A bytes progress bar; yields the callback to call with each chunk's size (None when off)."""
    if not enabled(show):
        yield None
        return
    if in_notebook():
        yield from _notebook_transfer(total, label)
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
    if in_notebook():
        line = NotebookLine(label)
        last = [label]

        def show_text(text: str) -> None:
            last[0] = f"{label}: {text}"
            line.update(last[0])

        try:
            yield show_text
        finally:
            line.update(last[0], force=True)  # the line ends on the last state, not a stale one
        return
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(label) as spinner:

        def update(text: str) -> None:
            spinner.update(f"{label}: {text}")

        yield update


def _notebook_transfer(total: int, label: str) -> Iterator[Callable[[int], None]]:
    line = NotebookLine(f"{label}: 0 of {_size(total)}")
    moved = [0]
    started = time.monotonic()

    def advance(n: int) -> None:
        moved[0] += n
        line.update(f"{label}: {_size(moved[0])} of {_size(total)}", moved[0], total)

    yield advance
    seconds = max(time.monotonic() - started, 1e-6)
    line.update(f"{label}: {_size(moved[0])} in {seconds:.1f} s", total or 1, total or 1, force=True)


def chain(*callbacks: Any) -> Callable[[int], None] | None:
    live = [c for c in callbacks if c is not None]
    if not live:
        return None

    def both(n: int) -> None:
        for callback in live:
            callback(n)

    return both
