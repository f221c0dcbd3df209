"""Jobs through a real Slurm (slurmctld + one slurmd with 2 CPUs, started by the session fixture)."""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from pathlib import Path

import pytest
from slurm_daemons import SlurmCluster
from slurm_jobs import CLUSTER, read, scheduler, stage, status, submit, wait

from batchai_sdk import Workspace
from batchai_sdk._models import ClusterSpec, JobSpec, JobState, NodeCounts
from batchai_sdk.backends.base import JobRequest
from batchai_sdk.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    NotSupportedError,
    SlurmCommandNotFoundError,
    SlurmRejectedError,
)

pytestmark = pytest.mark.slurm


def test_node_counts_and_nodes_from_sinfo(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    backend = slurm_ws.backend
    assert backend.node_counts(CLUSTER) == NodeCounts(idle=1)  # type: ignore[attr-defined]
    status = backend.cluster_status(CLUSTER)
    assert [(n.id, n.slots) for n in status.nodes] == [(slurm.node, 2)]
    assert status.node_states == {}


def test_one_node_job_succeeds_with_stdout_in_stdouterr(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    submit(slurm_ws, "hello", "import os\nprint('hello from', os.environ['AZ_BATCHAI_JOB_NAME'])\n")
    st = wait(slurm_ws, "hello")
    assert st.state is JobState.SUCCEEDED, st.failure_reason
    assert st.exit_code == 0
    assert st.nodes == (slurm.node,)
    assert read(slurm_ws, "hello", "stdout.txt") == "hello from hello\n"
    log = read(slurm_ws, "hello", f"execution-{slurm.node}.log")
    assert "rank 0 exited with code 0" in log


def test_two_task_job_runs_two_ranks_through_srun(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    src = "import os\nprint('rank', os.environ['SLURM_PROCID'], 'of', os.environ['SLURM_NTASKS'])\n"
    submit(slurm_ws, "pair", src, process_count=2)
    st = wait(slurm_ws, "pair")
    assert st.state is JobState.SUCCEEDED, st.failure_reason
    assert sorted(read(slurm_ws, "pair", "stdout.txt").splitlines()) == ["rank 0 of 2", "rank 1 of 2"]


def test_failing_job_reports_state_exit_code_and_rank(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    submit(slurm_ws, "boom", "import sys\nprint('bad input', file=sys.stderr)\nsys.exit(3)\n")
    st = wait(slurm_ws, "boom")
    assert st.state is JobState.FAILED
    assert st.exit_code == 3
    assert st.failure_reason == f"rank 0 on node {slurm.node} exited with code 3"
    assert "bad input" in read(slurm_ws, "boom", "stderr.txt")


def test_custom_command_job(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    submit(slurm_ws, "cmd", toolkit="custom", command_line="echo nodes=$SLURM_JOB_NUM_NODES; exit 4")
    st = wait(slurm_ws, "cmd")
    assert (st.state, st.exit_code) == (JobState.FAILED, 4)
    assert st.failure_reason == "the job's command exited with code 4"
    assert read(slurm_ws, "cmd", "stdout.txt") == "nodes=1\n"


def test_custom_command_runs_under_bash_with_every_node_in_its_hostfile(
    slurm: SlurmCluster, slurm_ws: Workspace
) -> None:
    command = 'source /dev/null && [[ -s "$AZ_BATCHAI_MPI_HOST_FILE" ]] && cat "$AZ_BATCHAI_MPI_HOST_FILE"'
    submit(slurm_ws, "bashcmd", toolkit="custom", command_line=command)
    st = wait(slurm_ws, "bashcmd")
    assert st.state is JobState.SUCCEEDED, st.failure_reason
    assert read(slurm_ws, "bashcmd", "stdout.txt") == f"{slurm.node} slots=1\n"


def test_terminate_running_job(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    submit(slurm_ws, "long", "import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    wait(slurm_ws, "long", until="running")
    assert scheduler(slurm_ws).assignments()[slurm.node].job == "exp/long"
    started = time.monotonic()
    scheduler(slurm_ws).terminate("exp", "long")
    st = wait(slurm_ws, "long", timeout=30)
    assert st.state is JobState.TERMINATED
    assert time.monotonic() - started < 20
    assert st.failure_reason is not None and "cancelled" in st.failure_reason


def test_job_pends_behind_a_full_node_then_terminate_while_queued(
    slurm: SlurmCluster, slurm_ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(slurm_ws, "hog", "import time\ntime.sleep(300)\n", process_count=2)  # both CPUs
    wait(slurm_ws, "hog", until="running")
    submit(slurm_ws, "behind", "print('ran')\n")
    monkeypatch.setenv("BATCHAI_HEARTBEAT_TIMEOUT", "1")
    time.sleep(2.5)  # several scheduling passes (sched_interval=1), past the heartbeat timeout
    behind = status(slurm_ws, "behind")
    assert (behind.state, behind.lost) == (JobState.QUEUED, False)  # pending in Slurm is not lost
    assert slurm.command("squeue", "-h", "-n", "batchai.slurmws.exp.behind", "-o", "%T").stdout == "PENDING\n"
    scheduler(slurm_ws).terminate("exp", "behind")
    st = status(slurm_ws, "behind")
    assert st.state is JobState.TERMINATED  # written from Slurm's state: the launcher never ran
    assert st.failure_reason == "cancelled in Slurm"
    assert not slurm_ws.share.exists(".batchai/experiments/exp/jobs/behind/stdouterr/stdout.txt")


def test_a_name_slurm_runs_is_refused(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    request = submit(slurm_ws, "once", "import time\ntime.sleep(300)\n")
    with pytest.raises(AlreadyExistsError, match="once"):
        scheduler(slurm_ws).submit(request)
    running = [j for j in slurm.command("squeue", "-h", "-o", "%j").stdout.split() if j.endswith(".once")]
    assert running == ["batchai.slurmws.exp.once"]


def test_unknown_partition_is_a_typed_error(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    backend = slurm_ws.backend
    other = ClusterSpec(name="gpu", vm_size="slurm", nodes=1, extra={"partition": "nosuch"})
    with pytest.raises(NotFoundError, match="nosuch"):
        backend.prepare(other, ())
    request = stage(slurm_ws, JobSpec(name="lost", experiment="exp", cluster="gpu", python_script="x.py"))
    with pytest.raises(SlurmRejectedError) as err:
        backend.scheduler(other).submit(request)  # type: ignore[attr-defined]
    assert err.value.code == "partition"
    assert "invalid partition specified: nosuch" in str(err.value)


def test_sbatch_missing_is_a_typed_error(slurm: SlurmCluster, tmp_path: Path) -> None:
    ws = Workspace.slurm(
        "noslurm", share_path=str(tmp_path), partition=slurm.partition, env={"PATH": "/nowhere"}
    )
    with pytest.raises(SlurmCommandNotFoundError, match="sinfo: not found on"):
        ws.backend.cluster_status(CLUSTER)
    with pytest.raises(SlurmCommandNotFoundError, match="sbatch: not found on") as err:
        ws.backend.commands.sbatch("#!/bin/sh\ntrue\n")  # type: ignore[attr-defined]
    assert (err.value.command, err.value.code) == ("sbatch", "missing")


def test_resize_is_slurms_and_create_checks_the_partition(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    cluster = slurm_ws.create_cluster("cpu", vm_size="slurm", nodes=1)
    with pytest.raises(NotSupportedError, match="Slurm manages the partition's capacity"):
        cluster.resize(4)
    with pytest.raises(NotFoundError, match="partition 'gpu'"):
        slurm_ws.create_cluster("gpu", vm_size="slurm", nodes=1, partition="gpu")


def test_wall_clock_limit_is_slurms_timeout(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    """Slurm's time limits are whole minutes: a 30 s limit asks --time=1 minute and ends within ~90 s."""
    submit(slurm_ws, "slow", "import time\ntime.sleep(600)\n", max_wall_clock_seconds=30)
    st = wait(slurm_ws, "slow", timeout=150)
    assert st.state is JobState.FAILED
    assert st.failure_reason is not None and "wall clock limit" in st.failure_reason
    assert "TIME LIMIT" in read(slurm_ws, "slow", "stderr.txt")


@pytest.mark.train
def test_horovod_two_ranks_through_srun_pmix(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Horovod over Open MPI started by ``srun --mpi=pmix`` (Debian's Open MPI speaks PMIx, not PMI2)."""
    pytest.importorskip("horovod.tensorflow")
    slurm.wait_idle()
    ws = Workspace.slurm(
        "hvd", share_path=str(tmp_path), partition=slurm.partition, python=sys.executable, mpi="pmix"
    )
    src = "import horovod.tensorflow as hvd\nhvd.init()\nprint('hvd', hvd.rank(), hvd.size(), flush=True)\n"
    submit(ws, "hvd2", src, process_count=2)
    st = wait(ws, "hvd2", timeout=180)
    assert st.state is JobState.SUCCEEDED, (st.failure_reason, read(ws, "hvd2", "stderr.txt")[-2000:])
    lines = sorted(ln for ln in read(ws, "hvd2", "stdout.txt").splitlines() if ln.startswith("hvd "))
    assert lines == ["hvd 0 2", "hvd 1 2"]


def test_secret_reaches_the_ranks_but_not_the_share(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    value = "s3cret-Value-42"
    digest = hashlib.sha256(value.encode()).hexdigest()  # the script must not hold the value itself
    src = (
        "import hashlib, os\n"
        "seen = hashlib.sha256(os.environ.get('API_TOKEN', '').encode()).hexdigest()\n"
        f"print('token ok' if seen == {digest!r} else 'token missing')\n"
    )
    submit(slurm_ws, "secret", src, environment={"API_TOKEN": value}, secret_environment=("API_TOKEN",))
    st = wait(slurm_ws, "secret")
    assert st.state is JobState.SUCCEEDED, st.failure_reason
    assert read(slurm_ws, "secret", "stdout.txt") == "token ok\n"
    share_root = Path(slurm_ws.backend.share_path)  # type: ignore[attr-defined]
    files = [p for p in share_root.rglob("*") if p.is_file()]
    assert any(p.name == "job.sbatch" for p in files)
    assert not [p for p in files if value.encode() in p.read_bytes()]


def test_one_name_submitted_at_once_runs_once(slurm: SlurmCluster, slurm_ws: Workspace) -> None:
    """4 clients submit one name at the same moment, 3 rounds: one job each round, the others refused."""
    for round_ in range(3):
        name = f"race{round_}"
        request = stage(slurm_ws, JobSpec(name=name, experiment="exp", cluster="cpu", python_script="job.py"))
        slurm_ws.share.write_text(f".batchai/experiments/exp/jobs/{name}/wd/job.py", "print('ran')\n")
        barrier = threading.Barrier(4)
        outcomes: list[str] = []

        def client(
            req: JobRequest = request, gate: threading.Barrier = barrier, out: list[str] = outcomes
        ) -> None:
            gate.wait()
            try:
                scheduler(slurm_ws).submit(req)
                out.append("submitted")
            except AlreadyExistsError:
                out.append("refused")

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["refused"] * 3 + ["submitted"]
        st = wait(slurm_ws, name)
        assert st.state is JobState.SUCCEEDED, st.failure_reason
        assert read(slurm_ws, name, "stdout.txt") == "ran\n"  # once
        deadline = time.monotonic() + 30  # our record is written before Slurm marks the job COMPLETED
        while True:
            jobs = slurm.command("squeue", "-h", "-t", "all", "-n", f"batchai.slurmws.exp.{name}", "-o", "%T")
            done = not any(state in jobs.stdout for state in ("RUNNING", "COMPLETING", "PENDING"))
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted(jobs.stdout.split()) == ["CANCELLED"] * jobs.stdout.count("CANCELLED") + ["COMPLETED"]
