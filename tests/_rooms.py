"""Rooms for a parallel run (``pytest -n 3 --dist loadgroup``, as ``nox -s tests`` runs the suite): every test
runs in one room, and a room runs on one worker from its first test to its last.

    slurm    tests/slurm: one real Slurm for the run (its session fixture would start one per worker)
    nsnodes  the namespace-node tests: one set of namespace nodes (a network slot, three machines'
             processes) for the run; head loss and its bounds run with no other node set beside them
    heavy    tests/train (CPU-bound on 2 cores) and the tests that measure time (TIMED: hang verdicts and
             their bounds, no false notice, a slow node's bandwidth): one at a time, never two trainings or
             two timers beside each other, while the other workers run tests that mostly wait
    else     its own module: module-scoped labs are set up once and a module's tests keep their order

A room is known from the test's path alone, because xdist's controller schedules by test ids (it collects
nothing): ``Rooms`` is that scheduler. pytest-xdist's own ``xdist_group`` marks cannot be used: xdist 3.8
writes the group into ``item._nodeid``, which pytest 9.2 no longer reads (its ids live in ``item._id``). The
three rooms go first in the collection, so that their long chains start while short modules fill the rest."""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

NSNODES = ("tests/ssh/machines/", "tests/ssh/test_ssh_blob_rclone.py", "tests/test_nsnodes.py")
TIMED = (
    "tests/node/policy/test_verdict_local.py",
    "tests/node/policy/test_verdict_deadlock_local.py",
    "tests/node/policy/test_progress_bound_local.py",
    "tests/node/policy/test_progress_no_false_notice_local.py",
    "tests/ssh/test_ssh_hang_verdict.py",
    "tests/ssh/test_ssh_hang_deadlock.py",
    "tests/ssh/test_ssh_health.py",
)
ROOMS = ("slurm", "nsnodes", "heavy")


def room(nodeid: str) -> str:
    """The room of the test ``nodeid`` (``tests/…/test_x.py::test_y[…]``)."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/slurm/"):
        return "slurm"
    if path.startswith(NSNODES):
        return "nsnodes"
    if path.startswith("tests/train/") or path in TIMED:
        return "heavy"
    return path


def check(item: pytest.Item) -> None:
    """A test that starts Slurm or namespace nodes must be in their room: its path says so."""
    for marker in ("slurm", "nsnodes"):
        if item.get_closest_marker(marker) and room(item.nodeid) not in ("slurm", marker):
            raise pytest.UsageError(f"{item.nodeid} is marked {marker}: add its path to tests/_rooms.py")


def first_the_rooms(items: list[pytest.Item]) -> None:
    """Put the rooms' tests first (in place; stable, so a module's tests keep their order)."""
    items.sort(key=lambda item: room(item.nodeid) not in ROOMS)


class Rooms(LoadScopeScheduling):
    """xdist's scope scheduling, where a test's scope is its room."""

    def _split_scope(self, nodeid: str) -> str:
        return room(nodeid)
