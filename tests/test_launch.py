"""The launch builders are pure: their exact output is the contract with mpirun and the nodes."""

from __future__ import annotations

import pytest

from batchai_sdk import JobSpec, ValidationError
from batchai_sdk._layout import JobPaths, share_relative
from batchai_sdk._models import Node
from batchai_sdk.backends.base import LaunchTarget
from batchai_sdk.launch import (
    job_environment,
    launch_config,
    mpirun_argv,
    node_command,
    ranks_per_node,
)
from batchai_sdk.node.common import hostfile_text, rank_node_ids


def target(**kw: object) -> LaunchTarget:
    nodes = (Node("n0", "10.0.0.4", "m0"), Node("n1", "10.0.0.5", "m1"))
    base: dict[str, object] = dict(
        nodes=nodes,
        node_share_root="/mnt/share",
        mount_root="/mnt",
        temp_root="/tmp/batchai",
        python="/usr/bin/python3",
        mpirun="/usr/bin/mpirun",
        ssh_command=("ssh", "-F", "/root/.batchai/c/ssh_config"),
        mpi_args=("--mca", "plm_rsh_agent", "ssh -F /root/.batchai/c/ssh_config"),
    )
    base.update(kw)
    return LaunchTarget(**base)  # type: ignore[arg-type]


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = dict(
        name="job1", experiment="cifar", cluster="nc6", node_count=2, python_script="train.py"
    )
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_ranks_per_node() -> None:
    assert ranks_per_node(4, None) == [1, 1, 1, 1]
    assert ranks_per_node(2, 5) == [3, 2]
    assert ranks_per_node(3, 3) == [1, 1, 1]


def test_hostfile_merges_consecutive_nodes_of_one_address() -> None:
    nodes = [
        {"id": "a0", "address": "localhost"},
        {"id": "a1", "address": "localhost"},
        {"id": "b", "address": "10.0.0.5"},
    ]
    assert hostfile_text(nodes, [1, 1, 2]) == "localhost slots=2\n10.0.0.5 slots=2\n"
    assert rank_node_ids(nodes, [1, 1, 2]) == ["a0", "a1", "b", "b"]


def test_mpirun_line_is_exact() -> None:
    argv = mpirun_argv(
        target(),
        processes=2,
        hostfile="/mnt/share/run/hostfile",
        export=["B", "A", "B"],
        rank_command=["/usr/bin/python3", "/mnt/share/run/job_wrapper.py", "rank", "/x.json"],
    )
    assert argv == [
        "/usr/bin/mpirun",
        "-np",
        "2",
        "--hostfile",
        "/mnt/share/run/hostfile",
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "--mca",
        "plm_rsh_agent",
        "ssh -F /root/.batchai/c/ssh_config",
        "-x",
        "A",
        "-x",
        "B",
        "/usr/bin/python3",
        "/mnt/share/run/job_wrapper.py",
        "rank",
        "/x.json",
    ]
    local = mpirun_argv(
        target(oversubscribe=True, mpi_args=()), processes=4, hostfile="h", export=[], rank_command=["p"]
    )
    assert local == [
        "/usr/bin/mpirun",
        "-np",
        "4",
        "--hostfile",
        "h",
        "-bind-to",
        "none",
        "-map-by",
        "slot",
        "--oversubscribe",
        "p",
    ]


def test_node_command_quotes_every_part() -> None:
    cmd = node_command(
        "/opt/py thon", "/mnt/share/x y/__main__.py", "ctl", "/tmp/s d", env={"PATH": "/a b:/usr/bin"}
    )
    assert cmd == "env 'PATH=/a b:/usr/bin' '/opt/py thon' -S '/mnt/share/x y/__main__.py' ctl '/tmp/s d'"
    assert node_command("python3", "/m.py", "reap", "x; rm -rf /") == "python3 -S /m.py reap 'x; rm -rf /'"


def test_share_relative_paths() -> None:
    sr = share_relative
    assert sr("$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/x.py", mount_path=None, share_name="s") == "cifar/x.py"
    assert sr("${AZ_BATCHAI_JOB_MOUNT_ROOT}/cifar", mount_path=None, share_name="s") == "cifar"
    assert sr("$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar", mount_path="myshare", share_name="s") == "cifar"
    assert sr("$AZ_BATCHAI_JOB_MOUNT_ROOT/other/cifar", mount_path="myshare", share_name="s") is None
    assert sr("$AZ_BATCHAI_MOUNT_ROOT/s/cifar", mount_path=None, share_name="s") == "cifar"
    assert sr("/abs/path.py", mount_path=None, share_name="s") is None
    assert sr("$AZ_BATCHAI_JOB_MOUNT_ROOTX/a", mount_path=None, share_name="s") is None


def test_stdouterr_prefix_must_be_on_the_share() -> None:
    paths = JobPaths.for_spec(spec(std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar"), "s")
    assert paths.stdouterr == "cifar/experiments/cifar/jobs/job1/stdouterr"
    assert JobPaths.for_spec(spec(), "s").stdouterr == ".batchai/experiments/cifar/jobs/job1/stdouterr"
    with pytest.raises(ValidationError) as err:
        JobPaths.for_spec(spec(std_out_err_path_prefix="/var/log"), "s")
    assert err.value.field == "std_out_err_path_prefix"


def test_environment_holds_batchai_variables_but_no_secrets() -> None:
    s = spec(
        environment={"LR": "0.1", "TOKEN": "s3cret", "DATA": "$AZ_BATCHAI_JOB_MOUNT_ROOT/data"},
        secret_environment=("TOKEN",),
        input_directories={"DATA": "$AZ_BATCHAI_JOB_MOUNT_ROOT/in"},
        output_directories={"MODEL": "$AZ_BATCHAI_JOB_MOUNT_ROOT/out"},
        mount_path=None,
    )
    paths = JobPaths.for_spec(s, "s")
    env, expand = job_environment(s, target(num_gpus=1), paths, share_name="s")
    assert env["AZ_BATCHAI_MOUNT_ROOT"] == "/mnt"
    assert env["AZ_BATCHAI_JOB_MOUNT_ROOT"] == "/mnt/share"
    assert env["AZ_BATCHAI_JOB_TEMP"] == "/tmp/batchai/cifar/job1/tmp"
    assert env["AZ_BATCHAI_STDOUTERR_DIR"] == "/mnt/share/.batchai/experiments/cifar/jobs/job1/stdouterr"
    assert env["AZ_BATCHAI_MPI_HOST_FILE"] == "/mnt/share/.batchai/experiments/cifar/jobs/job1/run/hostfile"
    assert env["AZ_BATCHAI_NUM_GPUS"] == "1"
    assert env["AZ_BATCHAI_OUTPUT_MODEL"] == "/mnt/share/out/experiments/cifar/jobs/job1/outputs/MODEL"
    assert env["AZ_BATCHAI_INPUT_DATA"] == "$AZ_BATCHAI_JOB_MOUNT_ROOT/in"
    assert "TOKEN" not in env
    assert sorted(expand) == ["AZ_BATCHAI_INPUT_DATA", "DATA"]
    cfg = launch_config(
        s,
        target(),
        paths,
        share_name="s",
        script_on_node="/mnt/share/wd/train.py",
        node_main="/mnt/share/.batchai/node/h/batchai_node/__main__.py",
    )
    assert "s3cret" not in repr(cfg)
    assert cfg["secret_names"] == ["TOKEN"]
    assert cfg["mpirun_argv"][cfg["mpirun_argv"].index("TOKEN") - 1 :][:2] == ["-x", "TOKEN"]


def test_relative_mount_path_gets_a_node_local_link() -> None:
    s = spec(mount_path="myshare")
    cfg = launch_config(
        s, target(), JobPaths.for_spec(s, "s"), share_name="s", script_on_node="x", node_main="/m.py"
    )
    assert cfg["env"]["AZ_BATCHAI_JOB_MOUNT_ROOT"] == "/tmp/batchai/cifar/job1/mounts"
    assert cfg["mount_link"] == {"path": "/tmp/batchai/cifar/job1/mounts/myshare", "target": "/mnt/share"}


def test_a_rank_in_a_container_sees_the_host_network_the_share_and_an_env_file() -> None:
    from batchai_sdk.node.job.rank import container_argv, container_env

    argv = container_argv(
        "/usr/bin/docker",
        "tensorflow/tensorflow:1.8.0-gpu",
        ["python", "/mnt/share/t.py", "--dir", "x y"],
        workdir="/mnt/share/wd",
        mounts=["/mnt/share", "/tmp/batchai/e/j", "/tmp", "/mnt/share"],
        env_file="/tmp/batchai/e/j/tmp/rank-0.env",
        gpus=True,
    )
    assert argv == [
        "/usr/bin/docker",
        "run",
        "--rm",
        "--network",
        "host",
        "--ipc",
        "host",
        "--pid",
        "host",
        "--env-file",
        "/tmp/batchai/e/j/tmp/rank-0.env",
        "-w",
        "/mnt/share/wd",
        "--gpus",
        "all",
        "-v",
        "/mnt/share:/mnt/share",
        "-v",
        "/tmp/batchai/e/j:/tmp/batchai/e/j",
        "-v",
        "/tmp:/tmp",
        "tensorflow/tensorflow:1.8.0-gpu",
        "python",
        "/mnt/share/t.py",
        "--dir",
        "x y",
    ]
    cfg = {"env": {"PATH": "/host/bin", "AZ_BATCHAI_JOB_TEMP": "/t", "LR": "0.1"}, "secret_names": []}
    env = {
        "PATH": "/host/bin",
        "AZ_BATCHAI_JOB_TEMP": "/t",
        "LR": "0.1",
        "OMPI_COMM_WORLD_RANK": "1",
        "HOME": "/root",
        "AZ_BATCHAI_TASK_INDEX": "1",
        "MULTI": "a\nb",
    }
    assert container_env(cfg, env) == {
        "AZ_BATCHAI_JOB_TEMP": "/t",
        "AZ_BATCHAI_TASK_INDEX": "1",
        "LR": "0.1",
        "OMPI_COMM_WORLD_RANK": "1",
    }
