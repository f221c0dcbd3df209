"""A full share mid-job (a real tmpfs that fills up): the job's true outcome is kept on the head node
and recorded once the share accepts writes again. Needs root to mount; skipped elsewhere."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk._models import NodeCounts


@pytest.fixture
def tmpfs_ws(tmp_path: Path) -> Iterator[Workspace]:
    share = tmp_path / "ws" / "mounts" / "share"
    share.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs share needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(share)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    ws = Workspace.local(root=tmp_path / "ws")
    try:
        yield ws
    finally:
        ws.close()
        subprocess.run(["umount", "-l", str(share)], check=False)


def fill(path: Path) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 65536)
    finally:
        os.close(fd)


def test_a_full_share_mid_job_keeps_the_true_exit_code_until_space_returns(
    tmpfs_ws: Workspace, tmp_path: Path
) -> None:
    ws = tmpfs_ws
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    gate = tmp_path / "gate"  # off the share: the job ends only once the share is full
    command = f"while [ ! -e {gate} ]; do sleep 0.1; done; exit 7"
    job = exp.create_job("full", cluster=cluster, command_line=command).submit()
    deadline = time.monotonic() + 30
    while job.state is not JobState.RUNNING or job.status.preparing:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    filler = Path(ws.share.root) / "filler"  # type: ignore[attr-defined]
    fill(filler)
    gate.touch()
    time.sleep(4)  # the job has ended by now; its record cannot be written
    assert job.state is JobState.RUNNING  # what the share last said
    filler.unlink()
    assert job.wait(timeout=30) is JobState.FAILED
    assert job.exit_code == 7
    assert cluster.node_counts == NodeCounts(idle=1)


def test_a_full_share_at_submit_is_a_typed_error_that_leaves_nothing(
    tmpfs_ws: Workspace, tmp_path: Path
) -> None:
    from batchai_sdk import ShareError

    ws = tmpfs_ws
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    big = tmp_path / "big.py"
    big.write_bytes(b"# " + b"x" * (5 << 20) + b"\n")  # larger than the whole share
    with pytest.raises(ShareError) as err:
        exp.create_job("big", cluster=cluster, python_script=str(big)).submit()
    assert "share 'share'" in str(err.value) and "script" in str(err.value)
    leftovers = [
        p for p in Path(ws.share.root).rglob("*") if "big" in str(p) or p.suffix in (".part", ".tmp")
    ]  # type: ignore[attr-defined]
    assert leftovers == []
    assert exp.list_jobs() == []
    ok = exp.create_job("big", cluster=cluster, command_line="true").submit()  # the name is free again
    assert ok.wait(timeout=60) is JobState.SUCCEEDED


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Callable[[Path], None]]:
    """``make(folder)``: bind-mounts ``folder`` over itself read-only (root bypasses chmod); undone after."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    mounted: list[Path] = []

    def make(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for argv in (
            ["mount", "--bind", str(folder), str(folder)],
            ["mount", "-o", "remount,bind,ro", str(folder)],
        ):
            done = subprocess.run(argv, capture_output=True)
            if done.returncode != 0:
                pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.decode().strip()}")
            if argv[1] == "--bind":
                mounted.append(folder)

    yield make
    for folder in reversed(mounted):
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.parametrize(
    ("read_only_folder", "what"),
    [
        (".batchai/experiments/e/jobs", "the job's folder"),
        ("logs", "the job's folders"),  # the name is reserved first, then this write fails
    ],
)
def test_a_read_only_share_at_submit_is_a_typed_error_that_leaves_nothing(
    ws: Workspace,
    read_only: Callable[[Path], None],
    script: Callable[[str, str], Path],
    read_only_folder: str,
    what: str,
) -> None:
    from batchai_sdk import ShareError

    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    share = Path(ws.share.root)  # type: ignore[attr-defined]
    read_only(share / read_only_folder)
    job = exp.create_job(
        "ro",
        cluster=cluster,
        python_script=str(script("s.py", "print('ran')\n")),
        std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/logs",
    )
    with pytest.raises(ShareError) as err:
        job.submit()
    assert "share 'share'" in str(err.value) and what in str(err.value), str(err.value)
    assert not job.submitted
    assert not (share / ".batchai" / "experiments" / "e" / "jobs" / "ro").exists()
    assert [p for p in share.rglob("*") if p.suffix in (".part", ".tmp")] == []
    assert exp.list_jobs() == []
    nodes = ws.share.read_json_or_none(".batchai/clusters/c/nodes.json") or {}
    assert nodes.get("queued", []) == [] and nodes.get("nodes", {}) == {}
