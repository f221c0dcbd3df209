"""The tutorial's workflow on the embedded local backend: real mpirun, real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import pid_alive, read_pid, wait_for
from batchai_sdk import (
    AlreadyExistsError,
    BatchAIError,
    CapacityError,
    ClusterBusyError,
    JobFailedError,
    JobState,
    NotFoundError,
    ValidationError,
    Workspace,
)
from batchai_sdk._models import ClusterState, NodeCounts

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

ENV_SCRIPT = """
    import json, os, sys
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    keys = sorted(k for k in os.environ if k.startswith("AZ_BATCHAI_") or k in ("LR", "TOKEN"))
    record = {"rank": rank, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": {k: os.environ[k] for k in keys}}
    with open(os.path.join(os.environ["AZ_BATCHAI_SHARED_JOB_TEMP"], f"rank-{rank}.json"), "w") as f:
        json.dump(record, f)
    print(f"rank {rank} says hello", flush=True)
    print(f"rank {rank} says bye", file=sys.stderr)
"""


def test_tutorial_workflow_two_nodes(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("cifar")
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=2, vm_priority="dedicated")
    cluster.wait_until_steady(timeout=5)
    assert cluster.state is ClusterState.STEADY
    assert cluster.node_counts == NodeCounts(idle=2)
    path = script("env_job.py", ENV_SCRIPT)
    job = exp.create_job(
        "cifar_distributed",
        cluster=cluster,
        node_count=2,
        python_script=str(path),
        args=["--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar", "${AZ_BATCHAI_NUM_GPUS}gpus", "$NOT_SET"],
        job_preparation="echo preparing; echo prep-err >&2",
        environment={"LR": "0.01"},
        secrets={"TOKEN": "s3cret-value"},
    )
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert job.exit_code == 0
    assert sorted(job.stream("stdout.txt", follow=False)) == ["rank 0 says hello", "rank 1 says hello"]
    shared_tmp = f"{job.paths.job_dir}/shared_tmp"
    records = [ws.share.read_json(f"{shared_tmp}/rank-{r}.json") for r in (0, 1)]
    share_root = str(ws.share.root)  # type: ignore[attr-defined]
    for r in records:
        # $VARS expanded on the node; an unset one is empty, as a shell (and Batch AI) made it
        assert r["argv"] == ["--dir", f"{share_root}/cifar", "0gpus", ""]
        assert r["cwd"] == f"{share_root}/.batchai/experiments/cifar/jobs/cifar_distributed/wd"
        env = r["env"]
        assert env["AZ_BATCHAI_JOB_MOUNT_ROOT"] == share_root
        assert env["AZ_BATCHAI_TASK_INDEX"] == str(r["rank"])
        assert env["LR"] == "0.01" and env["TOKEN"] == "s3cret-value"
        assert Path(env["AZ_BATCHAI_MPI_HOST_FILE"]).read_text().strip().endswith("slots=2")
        assert Path(env["AZ_BATCHAI_JOB_TEMP"]).is_dir()
        assert env["AZ_BATCHAI_STDOUTERR_DIR"].endswith("/stdouterr")
    names = [f.name for f in job.files()]
    node_ids = [n.id for n in ws.backend.cluster_status(cluster.spec).nodes]
    for node in node_ids:
        assert f"execution-{node}.log" in names
    # job preparation ran once: both local nodes are one machine
    assert names.count(f"stdout-job_prep-{node_ids[0]}.txt") == 1
    assert not any(n == f"stdout-job_prep-{node_ids[1]}.txt" for n in names)
    assert job.tail(f"stdout-job_prep-{node_ids[0]}.txt") == ["preparing"]
    assert "stdout.txt" in names and "stderr.txt" in names
    assert {"rank 0 says bye", "rank 1 says bye"} <= set(job.tail("stderr.txt", lines=50))
    sizes = {f.name: f.size for f in job.files()}
    assert sizes["stdout.txt"] and all(f.modified for f in job.files())
    # nothing secret in the records and logs of ours on the share (the script itself printed it to stdout)
    for path, _ in ws.share.walk(".batchai"):
        if not path.endswith(("secrets.json", "stdout.txt")) and "/shared_tmp/" not in path:
            assert b"s3cret-value" not in ws.share.read_bytes(path), path
    status = job.status
    assert status.start_time and status.end_time and status.creation_time
    assert status.start_time <= status.end_time
    cluster.resize(0)
    assert cluster.node_counts.total == 0
    assert ws.get_cluster("nc6cluster").target_nodes == 0


def test_horovod_allreduce_across_two_ranks(ws: Workspace, script: Script) -> None:
    pytest.importorskip("horovod.tensorflow")
    exp = ws.create_experiment("hvd")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    path = script(
        "allreduce.py",
        """
        import horovod.tensorflow as hvd
        import tensorflow as tf
        hvd.init()
        total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
        print(f"rank {hvd.rank()} of {hvd.size()}: sum={total.numpy()[0]:g}", flush=True)
    """,
    )
    job = exp.create_job("allreduce", cluster=cluster, node_count=2, python_script=str(path))
    job.submit()
    lines = list(job.stream("stdout.txt"))  # follows until the job ends
    assert job.state is JobState.SUCCEEDED
    assert sorted(line for line in lines if line.startswith("rank")) == [
        "rank 0 of 2: sum=3",
        "rank 1 of 2: sum=3",
    ]


def test_stream_follows_lines_as_they_are_written(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    path = script(
        "slow.py",
        """
        import time
        for i in range(5):
            print(f"line {i}", flush=True)
            time.sleep(0.4)
        print("no newline at the end", end="", flush=True)
    """,
    )
    job = exp.create_job("slow", cluster=cluster, python_script=str(path))
    job.submit()
    seen: list[tuple[float, str]] = []
    for line in job.stream("stdout.txt", poll_interval=0.1):
        seen.append((time.monotonic(), line))
    assert [line for _, line in seen] == [f"line {i}" for i in range(5)] + ["no newline at the end"]
    # lines arrived while the job ran, not all at the end
    assert seen[-1][0] - seen[0][0] > 1.0  # the job prints over 2 s
    assert job.state is JobState.SUCCEEDED


def test_a_failing_rank_fails_the_job_and_keeps_the_logs(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    path = script(
        "fail.py",
        """
        import os, sys, time
        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        print(f"rank {rank} started", flush=True)
        if rank == 1:
            print("ValueError: bad batch on rank 1", file=sys.stderr, flush=True)
            sys.exit(3)
        time.sleep(60)
    """,
    )
    job = exp.create_job("fails", cluster=cluster, node_count=2, python_script=str(path))
    job.submit()
    t0 = time.monotonic()
    assert job.wait(timeout=60) is JobState.FAILED
    assert time.monotonic() - t0 < 30, "the surviving rank must not keep the job alive"
    status = job.status
    assert status.exit_code not in (None, 0)
    assert "rank 1 on node" in (status.failure_reason or "")
    assert "exited with code 3" in (status.failure_reason or "")
    assert "rank 1 started" in job.tail("stdout.txt")
    assert any("bad batch" in line for line in job.tail("stderr.txt", 100))
    with pytest.raises(JobFailedError) as err:
        job.wait(raise_on_failure=True)
    assert err.value.state == "failed"
    # the nodes are free again
    assert cluster.node_counts == NodeCounts(idle=2)


def test_terminate_during_job_preparation_is_prompt(ws: Workspace, tmp_path: Path) -> None:
    """The preparation command is ended with its process group at once: the launcher itself ends (its
    result.json is there), before the scheduler's kill deadline (its grace + 5 s) would end it."""
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    marker = tmp_path / "prep.pid"
    job = exp.create_job(
        "prep", cluster=cluster, command_line="true", job_preparation=f"echo $$ > {marker}; sleep 300"
    ).submit()
    prep_pid = read_pid(marker)
    wait_for(lambda: job.status.preparing, what="the job to read preparing")
    t0 = time.monotonic()
    assert job.terminate(timeout=60) is JobState.TERMINATED
    took = time.monotonic() - t0
    assert not pid_alive(prep_pid)
    results = list((Path(ws.backend.root) / "tmp").rglob("result.json"))  # type: ignore[attr-defined]
    assert [json.loads(r.read_text())["stopped_by_signal"] for r in results] == [15]
    assert took < 15, f"terminate took {took:.1f} s: the launcher was killed, not stopped"


def test_terminate_stops_every_rank_within_seconds(ws: Workspace, script: Script, tmp_path: Path) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    pids = tmp_path / "pids"
    pids.mkdir()
    path = script(
        "forever.py",
        f"""
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        print("running", flush=True)
        while True:
            time.sleep(1)
    """,
    )
    job = exp.create_job("forever", cluster=cluster, node_count=2, python_script=str(path))
    job.submit()
    wait_for(lambda: len(list(pids.iterdir())) == 2, what="both ranks to start")
    assert job.state is JobState.RUNNING
    assert cluster.node_counts == NodeCounts(running=2)
    t0 = time.monotonic()
    assert job.terminate(timeout=30) is JobState.TERMINATED
    assert time.monotonic() - t0 < 15
    for pid_file in pids.iterdir():
        wait_for(
            lambda p=int(pid_file.name): not pid_alive(p),
            timeout=10,
            what=f"rank pid {pid_file.name} to exit",
        )
    assert job.status.failure_reason == "terminated by the user"
    assert "running" in job.tail("stdout.txt")
    assert job.terminate() is JobState.TERMINATED  # idempotent


def test_jobs_queue_for_busy_nodes_and_node_counts_follow(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    gate = tmp_path / "gate"
    first = script(
        "first.py",
        f"""
        import os, time
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.1)
    """,
    )
    second = script("second.py", "print('second ran')")
    a = exp.create_job("a", cluster=cluster, node_count=2, python_script=str(first)).submit()
    wait_for(lambda: a.state is JobState.RUNNING and cluster.node_counts.running == 2, what="job a to run")
    b = exp.create_job("b", cluster=cluster, node_count=1, python_script=str(second)).submit()
    time.sleep(2)
    assert b.state is JobState.QUEUED
    assert b.status.creation_time is not None
    gate.write_text("go")
    assert b.wait(timeout=60) is JobState.SUCCEEDED
    assert a.state is JobState.SUCCEEDED
    assert b.tail("stdout.txt") == ["second ran"]
    assert cluster.node_counts == NodeCounts(idle=2)


def test_reattach_from_another_process_after_the_submitter_exits(ws: Workspace, script: Script) -> None:
    root = ws.backend.root  # type: ignore[attr-defined]
    path = script("short.py", "import time; time.sleep(1); print('done')")
    submitter = f"""
from batchai_sdk import Workspace
ws = Workspace.local(root={str(root)!r})
exp = ws.create_experiment("e")
c = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
exp.create_job("j", cluster=c, python_script={str(path)!r}).submit()
print("submitted")
"""
    out = subprocess.run([sys.executable, "-c", submitter], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # the submitting process is gone; the job goes on and any process can re-attach
    job = Workspace.local(root=root).get_experiment("e").get_job("j")
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert job.tail("stdout.txt") == ["done"]
    assert [j.name for j in ws.get_experiment("e").list_jobs()] == ["j"]


def test_process_count_and_relative_mount_path(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    ws.share.write_text("cifar/data.txt", "on the share")
    path = script(
        "mount.py",
        """
        import os
        rank = os.environ["OMPI_COMM_WORLD_RANK"]
        data = open(os.path.expandvars("$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar/data.txt")).read()
        print(f"{rank} {os.environ['AZ_BATCHAI_TASK_INDEX']} {data}", flush=True)
    """,
    )
    job = exp.create_job(
        "m", cluster=cluster, node_count=2, process_count=4, python_script=str(path), mount_path="myshare"
    )
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    lines = sorted(job.tail("stdout.txt"))
    # ranks 0,1 on the first node (task index 0), ranks 2,3 on the second (task index 1)
    assert lines == ["0 0 on the share", "1 0 on the share", "2 1 on the share", "3 1 on the share"]


def test_script_already_on_the_share_and_output_directories(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    local = script(
        "save.py",
        """
        import os, sys
        out = os.environ["AZ_BATCHAI_OUTPUT_MODEL"]
        os.makedirs(os.path.join(out, "saved_models"), exist_ok=True)
        open(os.path.join(out, "saved_models", "model.h5"), "w").write("weights:" + sys.argv[1])
    """,
    )
    ws.share.upload(local, "cifar/save.py")
    job = exp.create_job(
        "o",
        cluster=cluster,
        python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/save.py",
        args=["v1"],
        output_directories={"MODEL": "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar"},
        std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar",
    )
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED, job.status.failure_reason
    assert [f.name for f in job.files(directory="MODEL")] == ["saved_models"]
    dest = job.download("saved_models/model.h5", tmp_path / "model.h5")
    assert dest.read_text() == "weights:v1"
    assert ws.share.exists("cifar/experiments/e/jobs/o/stdouterr/stdout.txt")
    with pytest.raises(ValidationError) as err:
        job.files(directory="NOPE")
    assert err.value.field == "directory"


def test_failed_job_preparation_fails_the_job_with_its_logs(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    path = script("never.py", "raise SystemExit('must not run')")
    job = exp.create_job(
        "p",
        cluster=cluster,
        python_script=str(path),
        job_preparation="echo installing; echo 'E: no package' >&2; exit 100",
    )
    job.submit()
    assert job.wait(timeout=60) is JobState.FAILED
    assert "job preparation failed" in (job.status.failure_reason or "")
    assert "exit code 100" in (job.status.failure_reason or "")
    prep_err = [f.name for f in job.files() if f.name.startswith("stderr-job_prep-")]
    assert prep_err and job.tail(prep_err[0]) == ["E: no package"]
    assert "stdout.txt" not in [f.name for f in job.files()]


def test_max_wall_clock_time_ends_the_job(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    path = script("long.py", "import time\nprint('start', flush=True)\ntime.sleep(120)")
    job = exp.create_job("w", cluster=cluster, python_script=str(path), max_wall_clock_time=2)
    job.submit()
    assert job.wait(timeout=40) is JobState.FAILED
    assert "maxWallClockTime" in (job.status.failure_reason or "")
    assert job.tail("stdout.txt") == ["start"]


def test_the_shipped_training_module_resolves_by_name(ws: Workspace) -> None:
    pytest.importorskip("batchai_sdk.train.cifar10")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("t", cluster=cluster, python_script="batchai_sdk.train.cifar10", args=["--help"])
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    assert any("--dataset" in line for line in job.tail("stdout.txt", 200))
    assert [f.name for f in ws.share.list(job.paths.wd)] == ["cifar10.py"]


class TestErrors:
    def test_unknown_resources(self, ws: Workspace) -> None:
        with pytest.raises(NotFoundError) as err:
            ws.get_experiment("nope")
        assert (err.value.kind, err.value.name) == ("experiment", "nope")
        with pytest.raises(NotFoundError):
            ws.get_cluster("nope")
        exp = ws.create_experiment("e")
        with pytest.raises(NotFoundError) as err:
            exp.get_job("nope")
        assert err.value.kind == "job"
        with pytest.raises(NotFoundError) as err:
            exp.create_job("j", cluster="nope", python_script="x.py")
        assert err.value.kind == "cluster"

    def test_invalid_names(self, ws: Workspace) -> None:
        with pytest.raises(ValidationError, match="experiment name"):
            ws.create_experiment("bad name")
        with pytest.raises(ValidationError, match="cluster name"):
            ws.create_cluster("x" * 65, vm_size="Standard_NC6", nodes=1)
        ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        with pytest.raises(ValidationError, match="job name"):
            ws.create_experiment("e").create_job("a/b", cluster="c", python_script="x.py")

    def test_duplicates(self, ws: Workspace, script: Script) -> None:
        exp = ws.create_experiment("e")
        with pytest.raises(AlreadyExistsError):
            ws.create_experiment("e")
        assert ws.create_experiment("e", exist_ok=True).name == "e"
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        with pytest.raises(AlreadyExistsError):
            ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        path = script("ok.py", "print('first')")
        job = exp.create_job("j", cluster=cluster, python_script=str(path)).submit()
        with pytest.raises(AlreadyExistsError) as err:
            exp.create_job("j", cluster=cluster, python_script=str(path))
        assert err.value.name == "j"
        with pytest.raises(AlreadyExistsError):
            job.submit()
        assert job.wait(timeout=60) is JobState.SUCCEEDED
        assert job.tail("stdout.txt") == ["first"]  # the record of the first job is intact

    def test_capacity_missing_script_and_resize(self, ws: Workspace, script: Script) -> None:
        exp = ws.create_experiment("e")
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
        with pytest.raises(CapacityError) as err:
            exp.create_job("j", cluster=cluster, node_count=3, python_script=str(script("a.py", "")))
        assert (err.value.requested, err.value.available) == (3, 2)
        with pytest.raises(NotFoundError) as nf:
            exp.create_job("j", cluster=cluster, python_script="does_not_exist.py")
        assert nf.value.kind == "script"
        with pytest.raises(NotFoundError, match=r"cifar/missing\.py"):
            exp.create_job("j", cluster=cluster, python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/missing.py")
        with pytest.raises(ValidationError) as verr:
            cluster.resize(-1)
        assert verr.value.field == "nodes"
        assert ws.get_cluster("c").target_nodes == 2
        assert exp.list_jobs() == []

    def test_deleting_a_busy_cluster_is_refused_unless_forced(self, ws: Workspace, script: Script) -> None:
        exp = ws.create_experiment("e")
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        path = script("sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(120)")
        job = exp.create_job("busy", cluster=cluster, python_script=str(path)).submit()
        wait_for(
            lambda: ws.share.exists(f"{job.paths.stdouterr}/stdout.txt") and job.tail() == ["up"],
            what="job to run",
        )
        with pytest.raises(ClusterBusyError) as err:
            ws.delete_cluster("c")
        assert err.value.jobs == ["e/busy"]
        assert ws.get_cluster("c").name == "c"
        assert job.state is JobState.RUNNING
        ws.delete_cluster("c", force=True)
        assert job.state is JobState.TERMINATED
        with pytest.raises(NotFoundError):
            ws.get_cluster("c")
        ws.delete_cluster("c")  # already gone: no error
        assert job.tail("stdout.txt") == ["up"]  # logs stay readable

    def test_unsubmitted_job_says_so(self, ws: Workspace, script: Script) -> None:
        exp = ws.create_experiment("e")
        ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        job = exp.create_job("j", cluster="c", python_script=str(script("x.py", "")))
        with pytest.raises(BatchAIError, match="submit"):
            _ = job.state
        assert "not submitted" in repr(job)


def test_workspace_default_root_comes_from_batchai_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    ws = Workspace.local()
    assert ws.share.exists(".batchai/workspace.json")
    assert (tmp_path / "home" / "mounts" / "share").is_dir()
    os.environ.pop("UNUSED", None)


def test_ranks_lines_never_run_into_each_other(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    # the ranks run unbuffered (PYTHONUNBUFFERED=1): print() writes a line's text and its newline in two
    # writes, which a busy machine can separate; here they are separated on purpose
    path = script(
        "chatty.py",
        """
        import os, time
        rank = os.environ["OMPI_COMM_WORLD_RANK"]
        for i in range(400):
            os.write(1, f"rank {rank} line {i:03d} ".encode() + b"x" * 40)
            time.sleep(0.001)
            os.write(1, b"\\n")
    """,
    )
    job = exp.create_job("chatty", cluster=cluster, node_count=2, python_script=str(path))
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    lines = list(job.stream("stdout.txt", follow=False))
    expected = {f"rank {r} line {i:03d} " + "x" * 40 for r in (0, 1) for i in range(400)}
    assert set(lines) == expected and len(lines) == 800
