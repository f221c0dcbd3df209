"""One fan-out: a function run for every node (or VM) at once, in threads, with one result shape for all
callers (fabric's ``GroupResult``): what each key returned, what each raised, and a ``NodeError`` that
names every failure and lists the rest."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..exceptions import NodeError
from .base import CommandResult

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["GroupResult", "fan_out"]


@dataclass(frozen=True)
class GroupResult(Generic[R]):
    """What ``fan_out`` found, by key: ``succeeded`` holds what the function returned (a command that
    exited non-zero too: it ran), ``failed`` what it raised. Every key is in one of them."""

    succeeded: dict[str, R]
    failed: dict[str, BaseException]

    def reasons(self) -> dict[str, str]:
        """Why each key failed, sorted by key: the exception's text, or for a command that ran and exited
        non-zero (a ``CommandResult`` that is not ``ok``) its ``describe()``."""
        out = {key: str(exc) or type(exc).__name__ for key, exc in self.failed.items()}
        for key, result in self.succeeded.items():
            if isinstance(result, CommandResult) and not result.ok:
                out[key] = result.describe()
        return dict(sorted(out.items()))

    def raise_on_failure(self, operation: str) -> None:
        """``NodeError(operation)`` naming each key that failed and why, and listing the others."""
        reasons = self.reasons()
        if reasons:
            raise NodeError(operation, reasons, sorted(set(self.succeeded) - set(reasons)))


def fan_out(items: Mapping[str, T], fn: Callable[[T], R], *, max_workers: int = 32) -> GroupResult[R]:
    """``fn`` on every item at once (at most ``max_workers`` threads); waits for all of them. An exception
    of ``fn`` is kept for its key, not raised (``GroupResult.raise_on_failure`` raises them as one)."""
    succeeded: dict[str, R] = {}
    failed: dict[str, BaseException] = {}
    if not items:
        return GroupResult(succeeded, failed)
    import concurrent.futures  # on first use: ``import batchai_sdk`` stays light (tests/test_import_cost.py)

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        futures = {pool.submit(fn, item): key for key, item in items.items()}
        for future in concurrent.futures.as_completed(futures):
            key = futures[future]
            try:
                succeeded[key] = future.result()
            except Exception as exc:
                failed[key] = exc
    return GroupResult(succeeded, failed)
