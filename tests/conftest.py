"""Shared fixtures: a local workspace in a temp dir and small job scripts written by the tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import _rooms
from batchai_sdk import Workspace
from nsnodes import NodesUnavailable, NSNodes, start_nodes


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup`` runs each test in its room (tests/_rooms.py)."""
    return _rooms.Rooms(config, log) if config.getvalue("dist") == "loadgroup" else None


_SHORT_BASETEMP = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before pytest reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    """With -n, the run's temp folder is a short one of its own (/tmp/pt-XXXXXXXX, each worker's under it as
    popen-gwN): the default one's path and the worker's folder are 10 characters longer than a plain run's,
    which put the node agent's socket under a test HOME past the 108 bytes of a Unix socket's path and made
    error messages shorten the paths a test looks for. Removed after a run that passed."""
    if (
        config.getoption("numprocesses", None)
        and not config.option.basetemp
        and not hasattr(config, "workerinput")
    ):
        config.option.basetemp = tempfile.mkdtemp(prefix="pt-")
        config.stash[_SHORT_BASETEMP] = config.option.basetemp


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    made = session.config.stash.get(_SHORT_BASETEMP, None)
    if made is not None and exitstatus == 0:
        shutil.rmtree(made, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # a plain ``pytest`` (no -n) runs the tests as collected
    for item in items:
        _rooms.check(item)
    _rooms.first_the_rooms(items)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the real ~/.batchai from a test."""
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path_factory.mktemp("batchai_home")))


@pytest.fixture(autouse=True)
def _no_leftover_processes(tmp_path: Path) -> Iterator[None]:
    """After each test, end what it left running from its temp folder (a scheduler, a launcher, ranks),
    so that a failed test does not leave them to the next ones."""
    yield
    root = str(tmp_path).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if root in cmdline:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    workspace = Workspace.local(root=tmp_path / "ws")
    yield workspace
    workspace.close()


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a Python script for a job: ``script("name.py", source)`` → its path."""

    def write(name: str, source: str) -> Path:
        path = tmp_path / "scripts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture(scope="session")
def ns_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NSNodes]:
    """Three nodes that are separate machines (own network, PID, UTS and mount namespaces, sshd on
    port 22; see nsnodes.py), shared by the session: each test that breaks one mends it
    (``heal_all``), and they are removed at the end, or skipped where namespaces are not allowed."""
    try:
        with start_nodes(tmp_path_factory.mktemp("nsnodes"), tmp_path_factory.getbasetemp(), 3) as nodes:
            yield nodes
    except NodesUnavailable as exc:
        pytest.skip(f"namespace nodes: {exc}")
