"""Batch AI's other toolkits through the cluster scheduler, end to end with real processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

ALLREDUCE = """
    import os, torch, torch.distributed as dist
    dist.init_process_group(backend=os.environ["AZ_BATCHAI_PYTORCH_BACKEND"],
                            init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    t = torch.tensor([float(os.environ["RANK"]) + 1])
    dist.all_reduce(t)
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "LOCAL_WORLD_SIZE", "AZ_BATCHAI_TASK_INDEX")
    print(" ".join(f"{k}={os.environ[k]}" for k in keys), f"sum={t.item():g}", flush=True)
    dist.destroy_process_group()
"""


def test_a_pytorch_job_runs_ddp_ranks_over_the_nodes(ws: Workspace, script: Script) -> None:
    pytest.importorskip("torch")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job("ddp", cluster=cluster, node_count=2, toolkit="pytorch", process_count=4,
                         python_script=str(script("ddp.py", ALLREDUCE)),
                         toolkit_settings={"communication_backend": "TCP"}).submit()  # fmt: skip
    assert job.wait(timeout=180) is JobState.SUCCEEDED, job.status.failure_reason
    lines = sorted(job.tail("stdout.txt", 10))
    assert len(lines) == 4 and all(line.endswith("sum=10") for line in lines)  # 1+2+3+4 on every rank
    assert (
        "RANK=3 LOCAL_RANK=1 WORLD_SIZE=4 NODE_RANK=1 LOCAL_WORLD_SIZE=2 AZ_BATCHAI_TASK_INDEX=3" in lines[3]
    )
    assert any("TCP" in line and "gloo" in line for line in job.tail("stderr.txt", 40))  # said once


RECORDER = """
    import json, os, sys, time
    role = os.environ.get("AZ_BATCHAI_TF_ROLE", "worker")
    keys = ("TF_CONFIG", "AZ_BATCHAI_TASK_INDEX", "AZ_BATCHAI_TF_ROLE", "AZ_BATCHAI_WORKER_HOSTS", "AZ_BATCHAI_PS_HOSTS")
    print(json.dumps({"argv": sys.argv[1:], **{k: os.environ.get(k) for k in keys}}), flush=True)
    shared = os.environ["AZ_BATCHAI_SHARED_JOB_TEMP"]
    if role == "ps":
        open(os.path.join(shared, "ps-up"), "w").close()
        time.sleep(300)  # a parameter server serves until it is stopped
    while not os.path.exists(os.path.join(shared, "ps-up")):  # workers need their parameter server
        time.sleep(0.05)
"""


def test_a_tensorflow_job_with_a_parameter_server_ends_cleanly(ws: Workspace, script: Script) -> None:
    import json

    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job("tf", cluster=cluster, node_count=2, toolkit="tensorflow",
                         python_script=str(script("tf.py", RECORDER)),
                         toolkit_settings={"worker_count": 2, "parameter_server_count": 1,
                                           "master_args": ["--role", "master"], "worker_args": ["--role", "worker"],
                                           "parameter_server_args": ["--role", "ps"]}).submit()  # fmt: skip
    assert job.wait(timeout=120) is JobState.SUCCEEDED, (
        job.status.failure_reason
    )  # the ps was stopped, not failed
    seen = sorted((json.loads(line) for line in job.tail("stdout.txt", 10)), key=lambda r: r["argv"])
    assert [r["argv"] for r in seen] == [["--role", "master"], ["--role", "ps"], ["--role", "worker"]]
    master, ps, worker = seen
    cluster_spec = json.loads(master["TF_CONFIG"])["cluster"]
    assert len(cluster_spec["worker"]) == 2 and len(cluster_spec["ps"]) == 1
    assert json.loads(ps["TF_CONFIG"])["task"] == {"type": "ps", "index": 0}
    assert json.loads(worker["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}


PRINTER = """
    import os, sys
    print(os.environ["AZ_BATCHAI_TASK_INDEX"], sys.argv[1:], flush=True)
"""


@pytest.mark.parametrize("toolkit", ["chainer", "cntk", "caffe", "caffe2"])
def test_every_script_toolkit_launches_its_script(ws: Workspace, script: Script, toolkit: str) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job(toolkit, cluster=cluster, node_count=2, toolkit=toolkit,
                         python_script=str(script("s.py", PRINTER)),
                         args=["--epochs", "1"] if toolkit != "caffe2" else []).submit()  # fmt: skip
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    expected_args = "['--epochs', '1']" if toolkit != "caffe2" else "[]"
    assert sorted(job.tail("stdout.txt", 10)) == [f"0 {expected_args}", f"1 {expected_args}"]


MWMS = """
import os, sys, json
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
value = strategy.run(lambda: tf.constant(float(task["index"] + 1)))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
print(f"{os.environ['AZ_BATCHAI_TF_ROLE']} replicas={strategy.num_replicas_in_sync} sum={float(total)}", flush=True)
"""


@pytest.mark.train
def test_a_two_worker_multiworker_mirrored_job_through_tensorflow_settings(
    ws: Workspace, script: Script
) -> None:
    pytest.importorskip("tensorflow")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job("mwms", cluster=cluster, node_count=2, toolkit="tensorflow",
                         python_script=str(script("mwms.py", MWMS)), toolkit_settings={"worker_count": 2, "parameter_server_count": 0},
                         environment={"TF_CPP_MIN_LOG_LEVEL": "2"}).submit()  # fmt: skip
    assert job.wait(timeout=300) is JobState.SUCCEEDED, job.status.failure_reason
    lines = sorted(line for line in job.tail("stdout.txt", 20) if "replicas=" in line)
    assert lines == ["master replicas=2 sum=3.0", "worker replicas=2 sum=3.0"]  # the two workers agree


DYING = """
import os, time, torch, torch.distributed as dist
dist.init_process_group(backend="gloo", init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
if os.environ["RANK"] == "1":
    open("rank1-dies", "w").close()  # in the job's working directory: the test's clock starts here
    raise RuntimeError("CUDA out of memory (simulated)")
dist.all_reduce(torch.ones(1))  # rank 0 waits for rank 1 for ever
time.sleep(600)
"""


def test_a_dying_ddp_rank_fails_the_job_within_30_s(ws: Workspace, script: Script) -> None:
    import time

    pytest.importorskip("torch")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    job = exp.create_job("dying", cluster=cluster, node_count=2, toolkit="pytorch",
                         python_script=str(script("dying.py", DYING))).submit()  # fmt: skip
    marker = ws.share.local_path(job.paths.wd) / "rank1-dies"  # type: ignore[attr-defined]
    # two ranks importing torch on a loaded machine
    wait_for(lambda: marker.exists() or job.state.ended, timeout=180, what="rank 1 to die")
    assert marker.exists(), job.status.failure_reason
    started = time.monotonic()  # from the rank's death, not from both ranks' start-up
    assert job.wait(timeout=60) is JobState.FAILED
    assert time.monotonic() - started < 30
    second = job.status.nodes[1]
    reason = job.status.failure_reason or ""
    assert (
        f"rank 1 on node {second}" in reason and "RuntimeError: CUDA out of memory (simulated)" in reason
    ), reason
