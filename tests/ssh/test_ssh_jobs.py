"""Horovod jobs across sshd nodes through the public API: real mpirun over ssh, real node setup."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from sshd import DEAD_ADDRESS, NODE_ADDRESSES, SSHNodes

from _labs import ssh_lab
from _procs import pid_alive, read_pid
from batchai_sdk import Workspace
from batchai_sdk._models import JobState, NodeCounts
from batchai_sdk.exceptions import NodeError, NotFoundError, ValidationError
from batchai_sdk.job import Job

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HOROVOD_SCRIPT = """
import os, socket
import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum).numpy()
print(f"rank {hvd.rank()} of {hvd.size()} sum {total:g} node {os.environ['AZ_BATCHAI_JOB_NAME']}", flush=True)
"""

DYING_RANK_SCRIPT = """
import os, signal, time
import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
hvd.allreduce(tf.constant(1.0))  # every rank is up
print(f"rank {hvd.rank()} passed the barrier", flush=True)
if hvd.rank() == 1:
    os.kill(os.getpid(), signal.SIGKILL)
hvd.allreduce(tf.constant(2.0))  # rank 0 would wait here forever without the failure handling
time.sleep(600)
"""


def ssh_workspace(nodes: SSHNodes, root: Path, hosts: list[str], name: str = "lab") -> Workspace:
    share = root / "mnt" / "share"
    share.mkdir(parents=True, exist_ok=True)
    return nodes.workspace(name, root, hosts)


lab = ssh_lab(NODE_ADDRESSES, "lab")


def write_script(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def output(job: Job, name: str = "stdout.txt") -> str:
    """What the job wrote to a log so far ("" before the log exists)."""
    try:
        return "\n".join(job.tail(name, 200))
    except NotFoundError:
        return ""


def setup_files(ws: Workspace, cluster: str) -> dict[str, tuple[float, bytes]]:
    """Node setup markers and logs on the share: name → (modified, content)."""
    root = Path(ws.backend.share_path) / ".batchai" / "clusters" / cluster / "setup"  # type: ignore[attr-defined]
    return {p.name: (p.stat().st_mtime, p.read_bytes()) for p in sorted(root.iterdir())}


@pytest.mark.train
def test_two_then_four_node_jobs_with_node_setup_once(lab: Workspace, tmp_path: Path) -> None:
    exp = lab.create_experiment("hvd", exist_ok=True)
    cluster = lab.create_cluster(
        "c4", vm_size="Standard_NC6", nodes=4, node_setup="echo set up on $(hostname)"
    )
    assert cluster.node_counts == NodeCounts(idle=4)
    script = write_script(tmp_path, "hvd_sum.py", HOROVOD_SCRIPT)

    two = exp.create_job("two", cluster=cluster, node_count=2, python_script=str(script))
    two.submit()
    assert two.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, two.tail("stderr.txt", 30)
    assert sorted(two.tail("stdout.txt")) == [
        "rank 0 of 2 sum 3 node two",
        "rank 1 of 2 sum 3 node two",
    ]
    names = {f.name for f in two.files()}
    assert {"stdout.txt", "stderr.txt", "execution-127.0.0.2.log", "execution-127.0.0.3.log"} <= names

    setup = setup_files(lab, "c4")
    for node in NODE_ADDRESSES:  # setup ran on every node of the cluster, once
        assert setup[f"stdout-setup-{node}.txt"][1].decode().count("set up on") == 1
        assert b'"state": "succeeded"' in setup[f"{node}.json"][1]

    four = exp.create_job("four", cluster=cluster, node_count=4, python_script=str(script))
    four.submit()
    assert four.wait(timeout=180, poll_interval=0.2) is JobState.SUCCEEDED, four.tail("stderr.txt", 30)
    assert sorted(four.tail("stdout.txt")) == [f"rank {r} of 4 sum 10 node four" for r in range(4)]
    assert {f"execution-{n}.log" for n in NODE_ADDRESSES} <= {f.name for f in four.files()}
    assert setup_files(lab, "c4") == setup  # the second job ran no node setup: nothing rewritten


@pytest.mark.train
def test_a_dying_rank_fails_the_whole_job_quickly(lab: Workspace, tmp_path: Path) -> None:
    exp = lab.create_experiment("hvd", exist_ok=True)
    cluster = lab.create_cluster("c2", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job(
        "dies",
        cluster=cluster,
        node_count=2,
        python_script=str(write_script(tmp_path, "dies.py", DYING_RANK_SCRIPT)),
    )
    job.submit()
    deadline = time.monotonic() + 120
    while "rank 1 passed the barrier" not in output(job) and time.monotonic() < deadline:
        assert not job.state.ended, job.tail("stderr.txt", 30)
        time.sleep(0.2)
    killed_at = time.monotonic()
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.FAILED
    assert time.monotonic() - killed_at < 20, "the surviving rank was left waiting"
    status = job.status
    assert status.exit_code not in (None, 0)
    reason = status.failure_reason or ""
    assert "rank 1" in reason and "127.0.0.3" in reason and "signal 9" in reason
    names = {f.name for f in job.files()}
    assert {"stdout.txt", "stderr.txt", "execution-127.0.0.2.log", "execution-127.0.0.3.log"} <= names
    assert "rank 0 passed the barrier" in job.tail("stdout.txt")
    assert cluster.node_counts == NodeCounts(idle=2)  # the nodes are free again


SLEEPER_SCRIPT = """
import os, pathlib, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
pathlib.Path(f"pid-{rank}").write_text(str(os.getpid()))
print(f"rank {rank} sleeping", flush=True)
time.sleep(600)
"""


def test_terminate_stops_the_ranks_on_every_node(lab: Workspace, tmp_path: Path) -> None:
    exp = lab.create_experiment("hvd", exist_ok=True)
    cluster = lab.create_cluster("c_term", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job(
        "sleeper",
        cluster=cluster,
        node_count=2,
        python_script=str(write_script(tmp_path, "s.py", SLEEPER_SCRIPT)),
    )
    job.submit()
    wd = Path(lab.backend.share_path) / job.paths.wd  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while len(list(wd.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        assert not job.state.ended, output(job, "stderr.txt")
        time.sleep(0.1)
    pids = [read_pid(p) for p in sorted(wd.glob("pid-*"))]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    assert job.terminate(timeout=60) is JobState.TERMINATED
    deadline = time.monotonic() + 20
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(pid_alive(p) for p in pids), "a rank outlived its terminated job"
    assert cluster.node_counts == NodeCounts(idle=2)


def test_secrets_reach_the_ranks_but_no_file_on_the_share(lab: Workspace, tmp_path: Path) -> None:
    exp = lab.create_experiment("hvd", exist_ok=True)
    cluster = lab.create_cluster("c_secret", vm_size="Standard_NC6", nodes=2)
    script = write_script(tmp_path, "s.py", "import os\nprint('token length', len(os.environ['TOKEN']))\n")
    job = exp.create_job(
        "secret", cluster=cluster, node_count=2, python_script=str(script), secrets={"TOKEN": "s3cr3t-v4lue"}
    )
    job.submit()
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.SUCCEEDED, output(job, "stderr.txt")
    assert job.tail("stdout.txt") == ["token length 12", "token length 12"]
    share = Path(lab.backend.share_path)  # type: ignore[attr-defined]
    for path in share.rglob("*"):
        if path.is_file() and b"s3cr3t-v4lue" in path.read_bytes():
            assert path.name == "secrets.json" and path.stat().st_mode & 0o777 == 0o600, path


def test_cluster_size_is_bounded_by_the_hosts(lab: Workspace) -> None:
    with pytest.raises(ValidationError) as err:
        lab.create_cluster("too_big", vm_size="Standard_NC6", nodes=5)
    assert err.value.field == "nodes"
    cluster = lab.create_cluster("small", vm_size="Standard_NC6", nodes=1)
    with pytest.raises(ValidationError):
        cluster.resize(5)
    cluster.resize(3)
    assert cluster.node_counts.total == 3


def test_an_unreachable_node_is_unusable_and_refuses_the_job(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    ws = ssh_workspace(ssh_nodes, tmp_path, [NODE_ADDRESSES[0], DEAD_ADDRESS], name="half")
    try:
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
        assert cluster.node_counts == NodeCounts(idle=1, unusable=1)
        exp = ws.create_experiment("e")
        job = exp.create_job(
            "j",
            cluster=cluster,
            node_count=2,
            python_script=str(write_script(tmp_path, "s.py", HOROVOD_SCRIPT)),
        )
        start = time.monotonic()
        with pytest.raises(NodeError) as err:
            job.submit()
        assert time.monotonic() - start < 15
        assert list(err.value.failures) == [DEAD_ADDRESS]
        assert DEAD_ADDRESS in str(err.value)
        assert exp.list_jobs() == []  # nothing half-started: no record, no wrapper
        assert not (tmp_path / "mnt" / "share" / ".batchai" / "experiments" / "e" / "jobs" / "j").exists()
    finally:
        ws.close()


def test_failed_node_setup_names_the_nodes_and_keeps_its_logs(lab: Workspace, tmp_path: Path) -> None:
    exp = lab.create_experiment("hvd", exist_ok=True)
    cluster = lab.create_cluster(
        "broken",
        vm_size="Standard_NC6",
        nodes=2,
        node_setup="echo installing; echo no such package >&2; exit 7",
    )
    job = exp.create_job(
        "j", cluster=cluster, node_count=2, python_script=str(write_script(tmp_path, "s.py", HOROVOD_SCRIPT))
    )
    with pytest.raises(NodeError) as err:
        job.submit()
    assert sorted(err.value.failures) == NODE_ADDRESSES[:2]
    assert all("exit code 7" in why and "no such package" in why for why in err.value.failures.values())
    assert "broken" in str(err.value)
    logs = setup_files(lab, "broken")
    assert b"installing" in logs["stdout-setup-127.0.0.2.txt"][1]
    assert b"no such package" in logs["stderr-setup-127.0.0.3.txt"][1]
    assert b'"state": "failed"' in logs["127.0.0.2.json"][1]
    assert not job.submitted
