"""Microsoft's 17 Batch AI recipe job files (tests/data/batchai_recipes, byte for byte) through `batchai job create
-f` on a local 2-node cluster. Stand-ins sit at every path a recipe names (its scripts, job-preparation
scripts, the `cntk` executable): each records its argv, its Batch AI variables and the hostfile it was given.
Each recipe must succeed with the process count, hostfile and variables Batch AI gave it.

The storage is made and filled as the recipes' READMEs did, through the CLI only: `batchai storage share
create` for `scripts` and `logs`, `storage container create` for `data`, `storage file upload` of each
stand-in and `storage directory create` / `storage blob upload` for the inputs a recipe names (nothing is
written into a storage folder behind the CLI's back). tests/test_recipe_readmes.py runs two READMEs' steps
verbatim.

No recipe needs its container image's own files: the images only brought the frameworks, which the
stand-ins replace, and a stand-in container engine runs each rank on the host (with or without a real
docker/podman here). Every recipe needs the mounts branch (merged here): 15 mount several file shares and
blob containers at job level, and the two BrainScript ones read ``$AZ_BATCHAI_MOUNT_ROOT/external``, a
cluster mount the local backend makes a folder of.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _stand_ins import stand_in_engine, stand_in_tools
from batchai_sdk import Workspace
from batchai_sdk._registry import Registry
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi

RECIPES = Path(__file__).parent / "data" / "batchai_recipes"  # a copy of ../shared/batchai-recipes
FILES = sorted(p.name for p in RECIPES.glob("*.json"))
RG = ["--resource-group", "recipes.rg", "--workspace", "ws"]
EXP = ["--experiment", "recipes"]
ACCOUNT = "recipestorage"

# What every stand-in runs: one JSON record per process in $AZ_BATCHAI_SHARED_JOB_TEMP/records.
RECORD = """
    import json, os, socket, sys, time
    KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if k in KEYS or k.startswith("AZ_BATCHAI_")}
    hostfile = env.get("AZ_BATCHAI_MPI_HOST_FILE")
    record = {"tool": sys.argv[1], "argv": sys.argv[2:], "env": env,
              "hostfile": open(hostfile).read() if hostfile and os.path.exists(hostfile) else None}
    shared = os.environ["AZ_BATCHAI_SHARED_JOB_TEMP"]
    out = os.path.join(shared, "records")
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(out, f"{socket.gethostname()}-{os.getpid()}.json"))
    if env.get("AZ_BATCHAI_TF_ROLE") == "ps":  # a parameter server serves until it is stopped
        open(os.path.join(shared, "ps-up"), "w").close()
        time.sleep(300)
    if env.get("AZ_BATCHAI_PS_HOSTS"):  # TensorFlow workers need their parameter server
        while not os.path.exists(os.path.join(shared, "ps-up")):
            time.sleep(0.05)
"""
# A recipe's job-preparation script: records that it ran; the Horovod benchmark's also fetches (here:
# writes) the benchmark script into $AZ_BATCHAI_JOB_TEMP, as the real one cloned tensorflow/benchmarks.
PREP = """#!/bin/bash
echo "$0" >> "$AZ_BATCHAI_SHARED_JOB_TEMP/prep.txt"
mkdir -p "$AZ_BATCHAI_JOB_TEMP/benchmarks/scripts/tf_cnn_benchmarks"
cp "{record}" "$AZ_BATCHAI_JOB_TEMP/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py"
"""
PATH_RE = re.compile(r"\$AZ_BATCHAI_JOB_MOUNT_ROOT/scripts/([\w./-]+\.(?:py|sh))")


def cli(*argv: str) -> str:
    """Run `batchai ...` in-process; its stdout (the call must succeed)."""
    from contextlib import redirect_stdout
    from io import StringIO

    buf = StringIO()
    with redirect_stdout(buf):
        code = main(list(argv))
    assert code == 0, f"batchai {' '.join(argv)} -> {code}"
    return buf.getvalue()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Workspace]]:
    """A local workspace with a 2-node cluster, the `cntk`, `apt`, `pip` and container-engine stand-ins
    first on PATH (the ranks inherit it) and the recorder."""
    root = tmp_path_factory.mktemp("recipes")
    bin_dir = root / "bin"
    record = root / "record.py"
    record.write_text(f"#!{sys.executable}\n" + textwrap.dedent(RECORD))
    record.chmod(0o755)
    stand_in_tools(bin_dir, root / "tools.log")
    stand_in_engine(bin_dir, root / "engine.log", engine="podman")
    (bin_dir / "cntk").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{record}" cntk "$@"\n')
    (bin_dir / "cntk").chmod(0o755)
    venv_bin = str(Path(sys.executable).parent)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BATCHAI_HOME", str(root / "home"))
        mp.setenv("BATCHAI_LOCAL_ALLOW_HOST_CHANGES", "1")  # apt, pip and the engine are stand-ins here
        mp.setenv("PATH", f"{bin_dir}{os.pathsep}{venv_bin}{os.pathsep}{os.environ['PATH']}")
        mp.chdir(root)
        cli("group", "create", "--name", "recipes.rg", "--location", "eastus")
        cli("workspace", "create", *RG)
        cli("experiment", "create", *RG, "--name", "recipes")
        cli("cluster", "create", *RG, "--name", "nc6", "--vm-size", "Standard_NC6", "--target", "2")
        cli("storage", "account", "create", "-g", "recipes.rg", "-n", ACCOUNT)
        for share in ("scripts", "logs"):
            cli("storage", "share", "create", "-n", share, "--account-name", ACCOUNT)
        cli("storage", "container", "create", "-n", "data", "--account-name", ACCOUNT)
        entry = Registry(root / "home").workspace_entry("recipes.rg", "ws")
        ws = Workspace.from_registry_entry(entry, "recipes.rg", "ws")
        yield root, ws
        cli("group", "delete", "--name", "recipes.rg", "--yes")  # stops the cluster's scheduler


def place_stand_ins(recipe: Path, record: Path, stage: Path) -> None:
    """A stand-in at every script path under the recipe's `scripts` share (the recorder for Python scripts,
    the job-preparation stand-in for shell scripts) and the inputs it names, all by `batchai storage`."""
    text = recipe.read_text()
    inputs = json.loads(text)["properties"].get("inputDirectories", [])
    for item in inputs:  # $AZ_BATCHAI_INPUT_SCRIPT/...
        text = text.replace(f"$AZ_BATCHAI_INPUT_{item['id']}", item["path"])
    on = ("--account-name", ACCOUNT)
    for rel in sorted(set(PATH_RE.findall(text))):
        local = stage / recipe.stem / rel
        local.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".py"):
            local.write_text(
                f"import runpy, sys\nsys.argv[1:1] = ['python']\nrunpy.run_path({str(record)!r})\n"
            )
        else:
            local.write_text(PREP.format(record=record))
        cli("storage", "file", "upload", "-s", "scripts", "--source", str(local), "--path", rel, *on)
    for item in inputs:
        m = re.fullmatch(r"\$AZ_BATCHAI_JOB_MOUNT_ROOT/(scripts|data)/(.+)", item["path"])
        if m and m.group(1) == "scripts":
            cli("storage", "directory", "create", "-s", "scripts", "-n", m.group(2), *on)
        elif m:  # a blob container has no folders: a blob under the prefix makes it one on the mount
            keep = stage / "input.txt"
            keep.write_text("input\n")
            cli(
                "storage",
                "blob",
                "upload",
                "-c",
                "data",
                "-f",
                str(keep),
                "-n",
                f"{m.group(2)}/input.txt",
                *on,
            )


def expected(doc: dict[str, Any]) -> tuple[int, str]:
    """(processes, toolkit key) Batch AI started for the recipe's properties on 2 nodes."""
    props = doc["properties"]
    key = next(k for k in props if k.endswith("Settings") and k != "containerSettings")
    settings, nodes = props[key], props["nodeCount"]
    if key == "tensorFlowSettings":
        workers = settings.get("workerCount", nodes)
        servers = settings.get("parameterServerCount", 1 if workers > 1 or nodes > 1 else 0)
        return workers + servers, key
    if key in ("customToolkitSettings", "caffe2Settings"):
        return (1 if key == "customToolkitSettings" else nodes), key
    return settings.get("processCount", nodes), key


@pytest.mark.parametrize("recipe", FILES)
def test_recipe_runs_unchanged(
    lab: tuple[Path, Workspace], recipe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ws = lab
    monkeypatch.setenv("BATCHAI_HOME", str(root / "home"))
    monkeypatch.setenv(
        "PATH", f"{root / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    monkeypatch.chdir(root)
    path = RECIPES / recipe
    doc = json.loads(path.read_text())
    place_stand_ins(path, root / "record.py", root / "stage")
    name = re.sub(r"[^A-Za-z0-9]+", "-", recipe.removesuffix(".json")).strip("-")[:60]
    job = ["--name", name, *RG, *EXP]
    cli("job", "create", "--cluster", "nc6", *job, "-f", str(path), "--storage-account-name", ACCOUNT)
    state = cli("job", "wait", *job, "--query", "[executionState, exitCode]", "-o", "tsv").split()
    exp = ws.get_experiment("recipes")
    handle = exp.get_job(name)
    assert state == ["succeeded", "0"], "\n".join(handle.tail("stderr.txt", lines=30))
    records_dir = Path(ws.share.root) / handle.paths.job_dir / "shared_tmp" / "records"  # type: ignore[attr-defined]
    records = [json.loads(p.read_text()) for p in sorted(records_dir.glob("*.json"))]
    count, key = expected(doc)
    assert len(records) == count, records
    for r in records:
        assert not any("$" in a for a in r["argv"]), r["argv"]  # every $VAR expanded, as Batch AI's shell did
        env = r["env"]
        assert env["AZ_BATCHAI_JOB_TEMP"].startswith(env["AZ_BATCHAI_JOB_TEMP_DIR"])
        slots = sum(int(line.split("slots=")[1]) for line in r["hostfile"].splitlines())
        assert slots >= count  # the hostfile holds every process of the job
        for out_id in (d["id"] for d in doc["properties"].get("outputDirectories", [])):
            assert Path(env[f"AZ_BATCHAI_OUTPUT_{out_id}"]).is_dir()
        for in_id in (d["id"] for d in doc["properties"].get("inputDirectories", [])):
            assert f"AZ_BATCHAI_INPUT_{in_id}" in env and "$" not in env[f"AZ_BATCHAI_INPUT_{in_id}"]
    sizes = {r["env"].get("OMPI_COMM_WORLD_SIZE") for r in records} - {None}
    assert sizes <= {str(count)}  # one MPI world of every process
    indexes = sorted(int(r["env"]["AZ_BATCHAI_TASK_INDEX"]) for r in records)
    if key == "caffe2Settings":  # the recipe passes --shard_id $AZ_BATCHAI_TASK_INDEX --num_shards 2
        assert indexes == [0, 1]
    if key == "tensorFlowSettings":
        roles = sorted(r["env"]["AZ_BATCHAI_TF_ROLE"] for r in records)
        workers = doc["properties"][key].get("workerCount", doc["properties"]["nodeCount"])
        assert roles.count("ps") == count - workers
        names = {f.name for f in handle.files()}
        tasks = {f"stdout-wk-{i}.txt" for i in range(workers)} | {
            f"stdout-ps-{i}.txt" for i in range(count - workers)
        }
        assert tasks <= names, (
            names
        )  # per-task logs, as Batch AI named them (the recipes stream stdout-wk-0.txt)
    elif key == "pyTorchSettings":
        assert indexes == list(range(count))
        assert {r["env"]["AZ_BATCHAI_PYTORCH_INIT_METHOD"] for r in records} == {
            f"tcp://{r['env']['MASTER_ADDR']}:{r['env']['MASTER_PORT']}" for r in records
        }
    elif key == "cntkSettings" and "configFilePath" in doc["properties"][key]:
        assert all(r["tool"] == "cntk" and r["argv"][0].startswith("configFile=") for r in records)
    prep = doc["properties"].get("jobPreparation", {}).get("commandLine", "")
    if "scripts/" in prep:
        prep_log = records_dir.parent / "prep.txt"
        assert prep_log.read_text().strip(), "the job preparation script did not run"
