"""A storage that hangs (a stuck FUSE or NFS server) keeps its job waiting as "does not answer" within the
look's deadline; it never stops the scheduler's loop, and it is used again once it answers."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from batchai_sdk.node.protocol.launch import MountLink
from batchai_sdk.node.scheduler import mount_waits


def test_a_hanging_storage_waits_within_the_deadline_and_is_used_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = tmp_path / "afs"
    hung.mkdir()
    release = threading.Event()
    real_isdir = os.path.isdir

    def isdir(path: object) -> bool:  # the kernel's stat on a server that stopped answering
        if str(path) == str(hung):
            release.wait(30)
        return real_isdir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "isdir", isdir)
    links = [MountLink(path="mounts/afs", target=str(hung))]
    started = time.monotonic()
    first = mount_waits.missing(links)
    assert time.monotonic() - started < mount_waits.PROBE_SECONDS + 1
    assert "does not answer" in first["afs"]
    started = time.monotonic()
    again = mount_waits.missing(links)  # the look still hangs: answered at once, no second thread
    assert time.monotonic() - started < 0.5
    assert "does not answer" in again["afs"]
    assert sum(t.name == "mount-look" for t in threading.enumerate()) == 1
    release.set()
    deadline = time.monotonic() + 5
    while mount_waits.missing(links) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mount_waits.missing(links) == {}
