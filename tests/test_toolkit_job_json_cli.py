"""Every toolkit from a job.json FILE, through `batchai job create --config-file`, on the local backend with
2 nodes: a stand-in script records what each rank got (argv, the toolkit's variables) in the job's output
directory, and the test reads those records back with `batchai job file list/download`."""

from __future__ import annotations

import json
import os
import shlex
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi

RG = ["--resource-group", "toolkits.rg", "--workspace", "ws"]
EXP = ["--experiment", "kits"]
STORAGE = ["--account-name", "kitstorage"]
MOUNT = "$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare"
SCRIPT = f"{MOUNT}/standin/record.py"

# What every rank runs (the python toolkits run it as the script; the command-line toolkits, the cntk and caffe
# stand-in executables call it): one JSON record per process in $AZ_BATCHAI_OUTPUT_RANKS.
RECORD = """
    import json, os, sys, time
    KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
            "TF_CONFIG", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k in KEYS or k.startswith("AZ_BATCHAI_")}
    record = {"argv": sys.argv[1:], "executable": sys.executable, "env": env}
    out = os.environ["AZ_BATCHAI_OUTPUT_RANKS"]
    tmp = os.path.join(out, f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(out, f"rank-{os.getpid()}.json"))
    shared = os.environ["AZ_BATCHAI_SHARED_JOB_TEMP"]
    if env.get("AZ_BATCHAI_TF_ROLE") == "ps":  # a parameter server serves until it is stopped
        open(os.path.join(shared, "ps-up"), "w").close()
        time.sleep(300)
    if "AZ_BATCHAI_TF_ROLE" in env:  # TensorFlow workers need their parameter server
        while not os.path.exists(os.path.join(shared, "ps-up")):
            time.sleep(0.05)
"""


def batchai(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One profile for the module: a local workspace, a 2-node cluster, a storage account whose share holds
    the stand-in script, and `cntk` / `caffe` stand-ins first on PATH (the ranks inherit it)."""
    root = tmp_path_factory.mktemp("toolkit-json")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for tool in ("cntk", "caffe"):  # record.py sees the tool's whole command line after the tool's name
        path = bin_dir / tool
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{root / "record.py"}" {tool} "$@"\n')
        path.chmod(0o755)
    (root / "record.py").write_text(textwrap.dedent(RECORD))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BATCHAI_HOME", str(root / "home"))
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        mp.chdir(root)
        run = _quiet_cli
        run("group", "create", "--name", "toolkits.rg", "--location", "eastus")
        run("workspace", "create", *RG)
        run("experiment", "create", *RG, "--name", "kits")
        run("cluster", "create", *RG, "--name", "two", "--vm-size", "Standard_D2_v2", "--target", "2")
        run("storage", "account", "create", "--resource-group", "toolkits.rg", "--name", "kitstorage",
            "--location", "eastus", "--sku", "Standard_LRS")  # fmt: skip
        run("storage", "share", "create", "--name", "myshare", *STORAGE)
        run("storage", "directory", "create", "--name", "standin", "--share-name", "myshare", *STORAGE)
        run("storage", "file", "upload", "--path", "standin", "--share-name", "myshare",
            "--source", "record.py", *STORAGE)  # fmt: skip
        for config in ("cifar.cntk", "solver.prototxt"):  # the config files the jobs name
            (root / config).write_text("# config\n")
            run("storage", "file", "upload", "--share-name", "myshare", "--source", config, *STORAGE)
        yield root
        run("group", "delete", "--name", "toolkits.rg", "--yes")  # stops the cluster's scheduler


def _quiet_cli(*argv: str) -> None:
    assert main(list(argv)) == 0, f"batchai {' '.join(argv)} failed"


@pytest.fixture
def profile(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The module's profile again (the autouse fixture gives each test a fresh BATCHAI_HOME)."""
    monkeypatch.setenv("BATCHAI_HOME", str(home / "home"))
    monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.chdir(home)
    return home


def job_json(settings_key: str, settings: dict[str, Any]) -> dict[str, Any]:
    """A 2018-05-01 job.json on 2 nodes with the share mounted and an output directory RANKS."""
    return {
        "$schema": "https://raw.githubusercontent.com/Azure/BatchAI/master/schemas/2018-05-01/job.json",
        "properties": {
            "nodeCount": 2,
            settings_key: settings,
            "stdOutErrPathPrefix": MOUNT,
            "mountVolumes": {
                "azureFileShares": [
                    {
                        "azureFileUrl": "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/myshare",
                        "relativeMountPath": "myshare",
                    }
                ]
            },
            "outputDirectories": [{"id": "RANKS", "pathPrefix": MOUNT}],
        },
    }


def run_job(
    capsys: pytest.CaptureFixture[str], root: Path, name: str, doc: dict[str, Any]
) -> list[dict[str, Any]]:
    """Write ``doc`` to a job.json file, create the job from it, wait, and return the ranks' records."""
    path = root / f"{name}.json"
    path.write_text(json.dumps(doc, indent=4))
    job = ["--name", name, *RG, *EXP]
    created = json.loads(batchai(capsys, "job", "create", "--cluster", "two", *job, "--config-file", str(path),
                                 "--storage-account-name", "kitstorage"))  # fmt: skip
    assert created["name"] == name
    waited = batchai(capsys, "job", "wait", *job, "--query", "[executionState, exitCode]", "-o", "tsv")
    assert waited.split() == ["succeeded", "0"], batchai(
        capsys, "job", "logs", *job, "--file-name", "stderr.txt"
    )
    ids = ["--job", name, *RG, *EXP, "--output-directory-id", "RANKS"]
    files = json.loads(batchai(capsys, "job", "file", "list", *ids))
    dest = root / "records" / name
    dest.mkdir(parents=True)
    for entry in files:
        batchai(capsys, "job", "file", "download", *ids, "--file-name", entry["name"], "--dest", str(dest))
    return [json.loads(p.read_text()) for p in sorted(dest.glob("rank-*.json"))]


def by(records: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: int(r["env"][key]))


def task_indexes(records: list[dict[str, Any]]) -> list[str]:
    return sorted(r["env"]["AZ_BATCHAI_TASK_INDEX"] for r in records)


# ------------------------------------------------------------------------------------------ the toolkits


def test_pytorch_settings_four_ranks_on_two_nodes(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = run_job(capsys, profile, "torch", job_json("pyTorchSettings", {
        "pythonScriptFilePath": SCRIPT,
        "pythonInterpreterPath": sys.executable,
        "commandLineArgs": "--epochs 3 --dist-url $AZ_BATCHAI_PYTORCH_INIT_METHOD",
        "processCount": 4,
        "communicationBackend": "TCP",
    }))  # fmt: skip
    assert len(records) == 4
    ranks = by(records, "RANK")
    env = [r["env"] for r in ranks]
    assert [e["RANK"] for e in env] == ["0", "1", "2", "3"]
    assert [e["AZ_BATCHAI_TASK_INDEX"] for e in env] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in env} == {"4"}
    assert [e["LOCAL_RANK"] for e in env] == ["0", "1", "0", "1"]  # two per node, filled node by node
    assert [e["NODE_RANK"] for e in env] == ["0", "0", "1", "1"]
    assert {e["LOCAL_WORLD_SIZE"] for e in env} == {"2"}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in env}) == 1
    assert {e["AZ_BATCHAI_PYTORCH_BACKEND"] for e in env} == {"gloo"}  # TCP runs as gloo
    init = f"tcp://{env[0]['MASTER_ADDR']}:{env[0]['MASTER_PORT']}"
    assert {e["AZ_BATCHAI_PYTORCH_INIT_METHOD"] for e in env} == {init}
    assert all(r["argv"] == ["--epochs", "3", "--dist-url", init] for r in ranks)  # $VARS expanded
    assert {r["executable"] for r in ranks} == {sys.executable}  # pythonInterpreterPath


def test_tensorflow_settings_two_workers_and_a_parameter_server(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = run_job(capsys, profile, "tf", job_json("tensorFlowSettings", {
        "pythonScriptFilePath": SCRIPT,
        "masterCommandLineArgs": "--job_name=worker --master --ps_hosts=$AZ_BATCHAI_PS_HOSTS "
                                 "--worker_hosts=$AZ_BATCHAI_WORKER_HOSTS --task_index=$AZ_BATCHAI_TASK_INDEX",
        "workerCommandLineArgs": "--job_name=worker --task_index=$AZ_BATCHAI_TASK_INDEX",
        "parameterServerCommandLineArgs": "--job_name=ps --task_index=$AZ_BATCHAI_TASK_INDEX",
        "workerCount": 2,
        "parameterServerCount": 1,
    }))  # fmt: skip
    assert len(records) == 3  # the parameter server was stopped when the workers ended: the job succeeded
    roles = {r["env"]["AZ_BATCHAI_TF_ROLE"]: r for r in records}
    assert sorted(roles) == ["master", "ps", "worker"]
    master, worker, ps = roles["master"], roles["worker"], roles["ps"]
    workers = master["env"]["AZ_BATCHAI_WORKER_HOSTS"]
    ps_hosts = master["env"]["AZ_BATCHAI_PS_HOSTS"]
    assert len(workers.split(",")) == 2 and len(ps_hosts.split(",")) == 1
    assert master["argv"] == ["--job_name=worker", "--master", f"--ps_hosts={ps_hosts}",
                              f"--worker_hosts={workers}", "--task_index=0"]  # fmt: skip
    assert worker["argv"] == ["--job_name=worker", "--task_index=1"]
    assert ps["argv"] == ["--job_name=ps", "--task_index=0"]
    for record, task in ((master, {"type": "worker", "index": 0}), (worker, {"type": "worker", "index": 1}),
                         (ps, {"type": "ps", "index": 0})):  # fmt: skip
        tf_config = json.loads(record["env"]["TF_CONFIG"])
        assert tf_config == {
            "cluster": {"worker": workers.split(","), "ps": ps_hosts.split(",")},
            "task": task,
        }


@pytest.mark.parametrize(
    ("key", "settings", "count", "indexes", "argv"),
    [
        pytest.param(
            "chainerSettings",
            {"pythonScriptFilePath": SCRIPT, "commandLineArgs": "--epochs 1", "processCount": 3},
            3,
            ["0", "1", "2"],
            ["--epochs", "1"],
            id="chainer",
        ),
        pytest.param(
            "cntkSettings",
            {
                "languageType": "Python",
                "pythonScriptFilePath": SCRIPT,
                "commandLineArgs": "--task $AZ_BATCHAI_TASK_INDEX",
            },
            2,
            ["0", "1"],
            ["--task", "{index}"],
            id="cntk-python",
        ),
        pytest.param(
            "cntkSettings",
            {
                "languageType": "BrainScript",
                "configFilePath": f"{MOUNT}/cifar.cntk",
                "commandLineArgs": "numEpochs=2",
            },
            2,
            ["0", "1"],
            ["cntk", "configFile={mount}/cifar.cntk", "numEpochs=2"],
            id="cntk-brainscript",
        ),
        pytest.param(
            "caffeSettings",
            {"pythonScriptFilePath": SCRIPT, "commandLineArgs": "--solver s.prototxt"},
            2,
            ["0", "1"],
            ["--solver", "s.prototxt"],
            id="caffe-python",
        ),
        pytest.param(
            "caffeSettings",
            {"configFilePath": f"{MOUNT}/solver.prototxt", "commandLineArgs": "-gpu all", "processCount": 2},
            2,
            ["0", "1"],
            ["caffe", "train", "--solver={mount}/solver.prototxt", "-gpu", "all"],
            id="caffe-solver",
        ),
        pytest.param(
            "caffe2Settings",
            {"pythonScriptFilePath": SCRIPT, "commandLineArgs": "-x 1"},
            2,
            ["0", "1"],
            ["-x", "1"],
            id="caffe2",
        ),
        pytest.param(
            "horovodSettings",
            {"pythonScriptFilePath": SCRIPT, "commandLineArgs": "--dir $AZ_BATCHAI_OUTPUT_RANKS"},
            2,
            ["0", "1"],
            ["--dir", "{out}"],
            id="horovod",
        ),
        pytest.param(
            "customMpiSettings",
            {
                "commandLine": f"{shlex.quote(sys.executable)} {SCRIPT} mpi $AZ_BATCHAI_TASK_INDEX",
                "processCount": 2,
            },
            2,
            ["0", "1"],
            ["mpi", "{index}"],
            id="custommpi",
        ),
        pytest.param(
            "customToolkitSettings",
            {"commandLine": f"{shlex.quote(sys.executable)} {SCRIPT} once"},
            1,
            ["0"],
            ["once"],
            id="custom",
        ),
    ],
)
def test_toolkit_ranks_get_their_index_and_args(
    request: pytest.FixtureRequest,
    profile: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    settings: dict[str, Any],
    count: int,
    indexes: list[str],
    argv: list[str],
) -> None:
    name = request.node.callspec.id
    records = run_job(capsys, profile, name, job_json(key, settings))
    assert len(records) == count
    assert task_indexes(records) == indexes
    if key != "customToolkitSettings":  # mpirun started them all, one MPI world
        assert sorted(r["env"]["OMPI_COMM_WORLD_RANK"] for r in records) == [str(i) for i in range(count)]
        assert {r["env"]["OMPI_COMM_WORLD_SIZE"] for r in records} == {str(count)}
    for record in records:
        env = record["env"]
        fill = {"index": env["AZ_BATCHAI_TASK_INDEX"], "mount": f"{env['AZ_BATCHAI_JOB_MOUNT_ROOT']}/myshare",
                "out": env["AZ_BATCHAI_OUTPUT_RANKS"]}  # fmt: skip
        assert record["argv"] == [a.format(**fill) for a in argv]
        assert env["AZ_BATCHAI_JOB_NAME"] == name and env["AZ_BATCHAI_EXPERIMENT_NAME"] == "kits"
        assert (
            "RANK" not in env and "TF_CONFIG" not in env
        )  # torch's and TensorFlow's variables only for them
