"""The per-rank toolkit logic the rank shim calls (node/policy/toolkits.py), on exact outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk.node.policy import toolkits as tk
from batchai_sdk.node.policy.toolkits import RankContext


def ctx(
    toolkit: str, rank: int, world: int, *, settings: dict[str, Any] | None = None, **kw: Any
) -> RankContext:
    nodes = kw.pop("nodes", ["10.0.0.4", "10.0.0.5"])
    layout = tk.ranks_per_node(len(nodes), world)
    node, local, local_world = tk.rank_layout(rank, layout)
    base: dict[str, Any] = dict(
        toolkit=toolkit,
        settings=settings or {},
        rank=rank,
        world_size=world,
        local_rank=local,
        local_world_size=local_world,
        node_rank=node,
        node_count=len(nodes),
        node_addresses=nodes,
        master_port=29500,
        python="/usr/bin/python3",
        script="$AZ_BATCHAI_JOB_MOUNT_ROOT/train.py",
        args=["--dir", "$AZ_BATCHAI_OUTPUT_MODEL"],
    )
    base.update(kw)
    return RankContext(**base)


# ------------------------------------------------------------------------------------------- layout


def test_ranks_per_node_and_layout() -> None:
    assert tk.ranks_per_node(2, 4) == [2, 2]
    assert tk.ranks_per_node(3, 4) == [2, 1, 1]
    assert tk.ranks_per_node(2, 1) == [1, 0]
    assert [tk.rank_layout(r, [2, 1, 1]) for r in range(4)] == [(0, 0, 2), (0, 1, 2), (1, 0, 1), (2, 0, 1)]
    with pytest.raises(ValueError, match="outside the layout"):
        tk.rank_layout(4, [2, 1, 1])
    with pytest.raises(ValueError):
        tk.ranks_per_node(0, 1)


# ---------------------------------------------------------------------------------------- counting


@pytest.mark.parametrize(
    ("toolkit", "settings", "nodes", "gpus", "expected"),
    [
        ("pytorch", {}, 2, 0, 2),
        ("pytorch", {}, 2, 4, 2),  # Batch AI: processCount defaults to nodeCount, GPUs or not
        ("pytorch", {"process_count": 3}, 2, 4, 3),
        ("horovod", {}, 3, 4, 3),
        ("horovod", {"process_count": 6}, 3, 0, 6),
        ("custommpi", {}, 2, 0, 2),
        ("custom", {}, 4, 2, 1),
        ("tensorflow", {}, 2, 0, 3),  # distributed: Batch AI's default of one parameter server
        ("tensorflow", {}, 1, 0, 1),  # one worker: no parameter server
        ("tensorflow", {"parameter_server_count": 0}, 2, 0, 2),
        ("tensorflow", {"worker_count": 4, "parameter_server_count": 2}, 2, 0, 6),
        ("tensorflow", {"parameter_server_args": ["--job_name=ps"]}, 2, 0, 3),
        ("chainer", {"process_count": 5}, 2, 0, 5),
        ("cntk", {}, 2, 1, 2),
        ("caffe", {}, 3, 1, 3),
        ("caffe2", {}, 2, 4, 2),
    ],
)
def test_process_count(toolkit: str, settings: dict[str, Any], nodes: int, gpus: int, expected: int) -> None:
    assert tk.process_count(toolkit, settings, nodes, gpus) == expected


def test_process_count_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="unknown toolkit 'mxnet'"):
        tk.process_count("mxnet", {}, 1, 0)
    with pytest.raises(ValueError, match="worker_count must be an integer"):
        tk.process_count("tensorflow", {"worker_count": "2"}, 1, 0)
    with pytest.raises(ValueError, match="at least one worker"):
        tk.process_count("tensorflow", {"worker_count": 0}, 1, 0)


# ------------------------------------------------------------------------------------------ pytorch


def test_pytorch_env_rank_3_of_4_on_two_nodes() -> None:
    env = tk.rank_env(ctx("pytorch", 3, 4, master_port=29511))
    assert env == {
        "AZ_BATCHAI_TASK_INDEX": "3",
        "MASTER_ADDR": "10.0.0.4",
        "MASTER_PORT": "29511",
        "WORLD_SIZE": "4",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",
        "ROLE_RANK": "3",
        "ROLE_WORLD_SIZE": "4",
        "AZ_BATCHAI_PYTORCH_INIT_METHOD": "tcp://10.0.0.4:29511",
        "AZ_BATCHAI_PYTORCH_BACKEND": "gloo",
    }


@pytest.mark.parametrize(
    ("given", "gpus", "backend"),
    [
        (None, 0, "gloo"),
        (None, 1, "nccl"),
        ("TCP", 1, "gloo"),
        ("Gloo", 0, "gloo"),
        ("NCCL", 1, "nccl"),
        ("mpi", 0, "mpi"),
    ],
)
def test_pytorch_backend(given: str | None, gpus: int, backend: str) -> None:
    settings = {} if given is None else {"communication_backend": given}
    env = tk.rank_env(ctx("pytorch", 0, 2, settings=settings, gpus_per_node=gpus))
    assert env["AZ_BATCHAI_PYTORCH_BACKEND"] == backend


def test_pytorch_backend_unknown() -> None:
    with pytest.raises(ValueError, match="expected one of tcp, gloo, nccl, mpi"):
        tk.resolve_backend({"communication_backend": "smoke"}, 0)


def test_pytorch_ipv6_master() -> None:
    env = tk.rank_env(ctx("pytorch", 0, 1, nodes=["fd00::4"]))
    assert env["MASTER_ADDR"] == "fd00::4"
    assert env["AZ_BATCHAI_PYTORCH_INIT_METHOD"] == "tcp://[fd00::4]:29500"


def test_backend_notice() -> None:
    assert (
        tk.backend_notice("pytorch", {"communication_backend": "TCP"})
        == "communicationBackend TCP no longer exists in torch: using gloo"
    )
    assert tk.backend_notice("pytorch", {"communication_backend": "MPI"}) == (
        "communicationBackend MPI needs a torch built with MPI (the wheels on PyPI are not): "
        "use gloo (CPU) or nccl (GPU) if init_process_group fails"
    )
    assert tk.backend_notice("pytorch", {"communication_backend": "gloo"}) is None
    assert tk.backend_notice("pytorch", {}) is None
    assert tk.backend_notice("horovod", {"communication_backend": "TCP"}) is None


def test_python_toolkits_argv() -> None:
    for toolkit in ("pytorch", "horovod", "chainer", "caffe2", "cntk", "caffe"):
        assert tk.rank_argv(ctx(toolkit, 1, 2)) == [
            "/usr/bin/python3",
            "$AZ_BATCHAI_JOB_MOUNT_ROOT/train.py",
            "--dir",
            "$AZ_BATCHAI_OUTPUT_MODEL",
        ], toolkit
    with pytest.raises(ValueError, match="a chainer rank needs a script"):
        tk.rank_argv(ctx("chainer", 0, 1, script=None))


def test_task_index_per_toolkit() -> None:
    assert tk.rank_env(ctx("horovod", 3, 4)) == {"AZ_BATCHAI_TASK_INDEX": "1"}  # the node's index
    assert tk.rank_env(ctx("custommpi", 1, 4)) == {"AZ_BATCHAI_TASK_INDEX": "0"}
    assert tk.rank_env(ctx("chainer", 3, 4)) == {"AZ_BATCHAI_TASK_INDEX": "3"}
    assert tk.rank_env(ctx("caffe2", 1, 2)) == {"AZ_BATCHAI_TASK_INDEX": "1"}
    assert all(tk.role(ctx(t, 1, 2)) == "worker" for t in ("pytorch", "horovod", "caffe", "custom"))


# ----------------------------------------------------------------------------------- cntk, caffe, mpi


def test_cntk_brainscript_and_caffe_solver() -> None:
    cntk = ctx(
        "cntk", 0, 2, script=None, settings={"language_type": "BrainScript", "config_file": "$X/cifar.cntk"}
    )
    assert tk.rank_argv(cntk) == ["cntk", "configFile=$X/cifar.cntk", "--dir", "$AZ_BATCHAI_OUTPUT_MODEL"]
    caffe = ctx("caffe", 0, 2, script=None, args=[], settings={"config_file": "$X/lenet_solver.prototxt"})
    assert tk.rank_argv(caffe) == ["caffe", "train", "--solver=$X/lenet_solver.prototxt"]
    with pytest.raises(ValueError, match="a cntk rank needs config_file"):
        tk.rank_argv(ctx("cntk", 0, 1, settings={"language_type": "brainscript"}))


def test_custom_command_line() -> None:
    c = ctx("custommpi", 0, 2, script=None, args=[], command_line="echo $AZ_BATCHAI_TASK_INDEX")
    assert tk.rank_argv(c) == ["bash", "--noprofile", "--norc", "-c", "echo $AZ_BATCHAI_TASK_INDEX"]
    with pytest.raises(ValueError, match="a custom rank needs a command line"):
        tk.rank_argv(ctx("custom", 0, 1))
    with pytest.raises(ValueError, match="unknown toolkit"):
        tk.rank_env(ctx("theano", 0, 1))


# --------------------------------------------------------------------------------------- tensorflow

TF = {
    "worker_count": 2,
    "parameter_server_count": 1,
    "master_args": ["--job_name=worker", "--task_index=$AZ_BATCHAI_TASK_INDEX"],
    "worker_args": ["--job_name=worker", "--task_index=$AZ_BATCHAI_TASK_INDEX"],
    "parameter_server_args": ["--job_name=ps", "--ps_hosts=$AZ_BATCHAI_PS_HOSTS"],
}


def test_tensorflow_two_workers_one_ps_on_two_nodes() -> None:
    # 3 tasks on 2 nodes: ranks 0, 1 on node 0 (the workers), rank 2 on node 1 (the parameter server)
    envs = [tk.rank_env(ctx("tensorflow", r, 3, settings=TF)) for r in range(3)]
    cluster = {"worker": ["10.0.0.4:29500", "10.0.0.4:29501"], "ps": ["10.0.0.5:29502"]}
    assert [json.loads(e["TF_CONFIG"]) for e in envs] == [
        {"cluster": cluster, "task": {"type": "worker", "index": 0}},
        {"cluster": cluster, "task": {"type": "worker", "index": 1}},
        {"cluster": cluster, "task": {"type": "ps", "index": 0}},
    ]
    assert envs[2] == {
        "AZ_BATCHAI_TASK_INDEX": "0",
        "TF_CONFIG": '{"cluster":{"worker":["10.0.0.4:29500","10.0.0.4:29501"],"ps":["10.0.0.5:29502"]},'
        '"task":{"type":"ps","index":0}}',
        "AZ_BATCHAI_WORKER_HOSTS": "10.0.0.4:29500,10.0.0.4:29501",
        "AZ_BATCHAI_PS_HOSTS": "10.0.0.5:29502",
        "AZ_BATCHAI_TF_ROLE": "ps",
    }
    assert [tk.role(ctx("tensorflow", r, 3, settings=TF)) for r in range(3)] == ["master", "worker", "ps"]
    assert [tk.rank_argv(ctx("tensorflow", r, 3, settings=TF))[2:] for r in range(3)] == [
        TF["master_args"],
        TF["worker_args"],
        TF["parameter_server_args"],
    ]


def test_tensorflow_workers_only_defaults() -> None:
    # parameterServerCount 0: one worker per node, no parameter server (MultiWorkerMirroredStrategy)
    env = tk.rank_env(ctx("tensorflow", 1, 2, settings={"worker_args": ["-v"], "parameter_server_count": 0}))
    assert env == {
        "AZ_BATCHAI_TASK_INDEX": "1",
        "TF_CONFIG": '{"cluster":{"worker":["10.0.0.4:29500","10.0.0.5:29501"]},"task":{"type":"worker","index":1}}',
        "AZ_BATCHAI_WORKER_HOSTS": "10.0.0.4:29500,10.0.0.5:29501",
        "AZ_BATCHAI_PS_HOSTS": "",
        "AZ_BATCHAI_TF_ROLE": "worker",
    }
    # the master falls back to the workers' args when it has none of its own
    assert tk.rank_argv(ctx("tensorflow", 0, 2, settings={"worker_args": ["-v"]})) == [
        "/usr/bin/python3",
        "$AZ_BATCHAI_JOB_MOUNT_ROOT/train.py",
        "-v",
    ]
    with pytest.raises(ValueError, match="world_size 2 != 2 workers"):
        tk.rank_env(ctx("tensorflow", 0, 2))  # Batch AI's default for 2 nodes adds a parameter server
    with pytest.raises(ValueError, match="worker_args must be a list of strings"):
        tk.rank_argv(ctx("tensorflow", 1, 2, settings={"worker_args": "-v"}))


def test_workers_done_markers(tmp_path: Path) -> None:
    shared = str(tmp_path / "shared")
    assert not tk.workers_done(shared, 2)
    tk.mark_worker_done(shared, 1)
    assert not tk.workers_done(shared, 2)
    tk.mark_worker_done(shared, 0)
    assert tk.workers_done(shared, 2)
    assert sorted(p.name for p in (tmp_path / "shared" / tk.DONE_FOLDER).iterdir()) == [
        "worker-0.done",
        "worker-1.done",
    ]


def test_run_parameter_server_is_stopped_when_workers_end(tmp_path: Path) -> None:
    shared = str(tmp_path)
    ps = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = time.monotonic()
    tk.mark_worker_done(shared, 0)
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)"], check=True)  # worker 1 "trains"
    tk.mark_worker_done(shared, 1)
    assert tk.run_parameter_server(ps, shared, 2, poll=0.05) == 0
    assert ps.returncode == -15  # stopped by SIGTERM, reported as success
    assert time.monotonic() - start < 10


def test_run_parameter_server_reports_its_own_failure(tmp_path: Path) -> None:
    ps = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert tk.run_parameter_server(ps, str(tmp_path), 1, poll=0.05) == 3


def test_run_parameter_server_kills_after_grace(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    ps = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert ps.stdout is not None and ps.stdout.readline() == b"up\n"
    tk.mark_worker_done(str(tmp_path), 0)
    assert tk.run_parameter_server(ps, str(tmp_path), 1, poll=0.05, grace=0.3) == 0
    assert ps.returncode == -9
    ps.stdout.close()


def test_module_is_stdlib_only() -> None:
    # the nodes run it with their own Python under -S: it must import with nothing but the standard library
    src = Path(tk.__file__)
    out = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            f"import importlib.util as u; s=u.spec_from_file_location('t', {str(src)!r}); "
            "m=u.module_from_spec(s); import sys; sys.modules['t']=m; s.loader.exec_module(m); print(m.TOOLKITS[0])",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "horovod\n"


def test_custom_jobs_hostfile_lists_every_node_of_the_job() -> None:
    # a 2-node custom job runs its command once, yet its own `mpirun --hostfile` must see both nodes
    assert tk.hostfile_slots("custom", tk.ranks_per_node(2, tk.process_count("custom", {}, 2, 0))) == [1, 1]
    assert tk.hostfile_slots("custommpi", [1, 0, 0]) == [1, 1, 1]  # processCount 1 of 3 nodes: rank 0 first
    assert tk.hostfile_slots("custommpi", [2, 2]) == [2, 2]
    assert tk.hostfile_slots("horovod", [1, 0]) == [1, 0]  # our own mpirun: only the nodes with ranks


def test_tensorflow_task_logs_are_named_as_batch_ai_named_them() -> None:
    names = [tk.task_log_names(ctx("tensorflow", r, 3, settings=TF)) for r in range(3)]
    assert names == [
        ("stdout-wk-0.txt", "stderr-wk-0.txt"),  # the master is worker 0
        ("stdout-wk-1.txt", "stderr-wk-1.txt"),
        ("stdout-ps-0.txt", "stderr-ps-0.txt"),
    ]
    # PyTorch and Caffe2: one pair per process (the PyTorch recipe streams stdout-0.txt, Caffe2's stderr-0.txt)
    assert tk.task_log_names(ctx("pytorch", 1, 2)) == ("stdout-1.txt", "stderr-1.txt")
    assert tk.task_log_names(ctx("caffe2", 0, 2)) == ("stdout-0.txt", "stderr-0.txt")
    assert tk.task_log_names(ctx("horovod", 0, 2)) is None
