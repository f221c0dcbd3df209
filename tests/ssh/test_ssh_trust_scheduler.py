"""Trust boundaries of the head node's scheduler on real sshd nodes (127.0.0.2 head, 127.0.0.3), as the
local tests check them on local nodes: a used ``request_id`` with other content is refused over SSH; the
scheduler's socket removed or replaced under it is bound again and the next submit goes through at once;
a quarantined running job's row never frees its node under its running rank; and no pre-started MPI
world (the local backend's alone) leaves a shim waiting over SSH that a SIGSTOP could freeze."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _procs import pid_alive, read_pid, wait_for
from _scheduler_procs import scheduler_pid
from batchai_sdk import JobState, Workspace
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]


@pytest.fixture(scope="module")
def lab(ssh_nodes: SSHNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, Path]]:
    root = tmp_path_factory.mktemp("trustsched")
    ws = ssh_nodes.workspace("trustsched", root, [HEAD, SECOND])
    yield ws, root / "node_state" / "tmp" / "scheduler"
    ws.close()


def _fresh(lab: tuple[Workspace, Path], name: str, nodes: int = 2) -> tuple[Experiment, Cluster, Path]:
    """An experiment and a cluster of their own, and the folder of that cluster's scheduler (on the head
    node, which on loopback nodes is this machine's disk)."""
    ws, sched_root = lab
    return ws.create_experiment(name), ws.create_cluster(name, nodes=nodes), sched_root / name


def _long(exp: Experiment, cluster: Cluster, tmp_path: Path, name: str) -> tuple[Any, int]:
    pid_file = tmp_path / f"{name}.pid"
    job = exp.create_job(
        name, cluster=cluster, toolkit="custom", command_line=f"echo $$ > {pid_file}; exec sleep 300"
    ).submit()
    return job, read_pid(pid_file, timeout=90)


def test_a_replayed_request_id_with_other_content_is_refused_over_ssh(lab: tuple[Workspace, Path]) -> None:
    ws, _ = lab
    exp, cluster, _ = _fresh(lab, "r", nodes=1)
    first = exp.create_job("first", cluster=cluster, toolkit="custom", command_line="true").submit()
    assert first.wait(timeout=90) is JobState.SUCCEEDED
    scheduler = ws.backend.scheduler(cluster.spec)  # type: ignore[attr-defined]
    used = uuid.uuid4().hex

    def submit(name: str) -> dict[str, Any]:
        request = {"op": "submit", "request_id": used, "experiment": exp.name, "name": name, "node_count": 1}
        reply: dict[str, Any] = scheduler.call(request, timeout=60)  # through ssh and ctl, as a submit goes
        return reply

    one = submit("once")
    assert one["ok"], one
    again = submit("once")  # the same request resent: the same job, nothing new
    assert again["ok"] and again["id"] == one["id"] and again.get("repeated"), again
    other = submit("other")  # other content under the used id
    assert not other["ok"] and other["error"] == "request_id_reused", other
    assert "request_id" in str(other.get("message"))
    known = scheduler.call({"op": "job", "experiment": exp.name, "name": "other"}, timeout=60)
    assert known.get("ok") and known.get("found") is False, known  # never read as queued


@pytest.mark.parametrize("how", ["removed", "a regular file"])
def test_a_submit_goes_through_at_once_when_the_socket_was_removed_or_replaced_over_ssh(
    lab: tuple[Workspace, Path], tmp_path: Path, how: str
) -> None:
    exp, cluster, state = _fresh(lab, "s" + how[0])
    long, pid = _long(exp, cluster, tmp_path, "long")
    try:
        sock = state / "sched.sock"
        sock.unlink()
        if how == "a regular file":
            sock.write_text("not a socket")
        wait_for(lambda: sock.is_socket(), timeout=1.5, what="the scheduler to bind its socket again")
        t = time.monotonic()
        job = exp.create_job("next", cluster=cluster, toolkit="custom", command_line="true").submit()
        took = time.monotonic() - t
        assert took < 10, f"the submit took {took:.1f} s"
        assert job.wait(timeout=90) is JobState.SUCCEEDED
    finally:
        long.terminate(timeout=60)
    assert not pid_alive(pid)


# a rank that fails (exit 3) when the process ``argv[1]`` still runs (not a zombie) on its node
CHECK_FREE = (
    "python3 -c \"import sys, pathlib; s = pathlib.Path('/proc/' + sys.argv[1] + '/stat');"
    " sys.exit(3 if s.exists() and s.read_text().rsplit(')', 1)[1].split()[0] != 'Z' else 0)\" "
)


def test_quarantining_a_running_jobs_row_never_frees_its_node_under_its_rank_over_ssh(
    lab: tuple[Workspace, Path], tmp_path: Path
) -> None:
    exp, cluster, state = _fresh(lab, "q", nodes=1)
    long, rank = _long(exp, cluster, tmp_path, "long")
    sched = scheduler_pid(state)
    assert sched is not None
    os.kill(sched, signal.SIGKILL)  # the scheduler dies; its job runs on
    wait_for(lambda: not pid_alive(sched), timeout=30, what="the scheduler to die")
    with sqlite3.connect(state / "sched.db") as db:  # a value no code path expects, as a bug left it
        db.execute("UPDATE jobs SET wall = 'soon' WHERE key = ?", (f"{exp.name}/long",))
    after = exp.create_job("next", cluster=cluster, toolkit="custom", command_line=CHECK_FREE + str(rank))
    after.submit()  # starts the scheduler again, which quarantines the row
    assert after.wait(timeout=120) is JobState.SUCCEEDED, after.status.failure_reason
    assert not pid_alive(rank)  # ended before its node was given again
    status = long.status
    assert status.state is JobState.FAILED and "quarantined" in (status.failure_reason or "")


def _shims(state: Path) -> list[int]:
    """Waiting shims of a pre-started MPI world of the cluster whose scheduler folder is ``state``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"rank\0--world\0" in argv and bytes(state) in argv and b"mpirun" not in argv:
            found.append(int(entry))
    return found


def test_no_shim_waits_over_ssh_the_queued_job_starts_its_own_mpirun(
    lab: tuple[Workspace, Path], tmp_path: Path
) -> None:
    """The pre-started world is the local backend's alone (node/job/world.py): over SSH no shim waits
    that a SIGSTOP could freeze, and a queued 2-node job runs each rank once in an mpirun of its own
    (the stopped-shim check itself: tests/test_prestarted_world.py)."""
    exp, cluster, state = _fresh(lab, "w")
    out, gate = tmp_path / "out", tmp_path / "gate"
    out.mkdir()
    holder = exp.create_job(
        "holder",
        cluster=cluster,
        toolkit="custom",
        command_line=f"while [ ! -e {gate} ]; do sleep 0.05; done",
    ).submit()
    record = f"set -o noclobber; echo ran > {out}/wide-$OMPI_COMM_WORLD_RANK"
    wide = exp.create_job("wide", cluster=cluster, node_count=2, command_line=record).submit()
    wait_for(lambda: holder.state is JobState.RUNNING, 90, "the holder to run")
    time.sleep(3)  # the local backend's spare starts its world within a second of the queue's head
    assert _shims(state) == []
    gate.touch()
    assert holder.wait(timeout=90) is JobState.SUCCEEDED
    assert wide.wait(timeout=90) is JobState.SUCCEEDED, wide.status.failure_reason
    assert sorted(p.name for p in out.iterdir()) == ["wide-0", "wide-1"]  # both ranks ran, once
