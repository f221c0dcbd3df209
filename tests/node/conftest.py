"""Fixtures of the node tests (tests/node/): ``procs``, the processes a test started (tests/_node_procs.py),
killed and reaped at its end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from _node_procs import Procs


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    for proc in p.started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
