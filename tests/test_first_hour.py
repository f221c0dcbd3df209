"""What a new user meets first: scripts that run twice, failures that say why, errors that name the way out."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import AlreadyExistsError, CapacityError, JobFailedError, JobState, Workspace

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]


def tutorial_run(ws: Workspace, script: Path) -> JobState:
    """The README's snippet, as a user runs it again and again."""
    exp = ws.create_experiment("cifar", exist_ok=True)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=2, exist_ok=True)
    job = exp.create_job("cifar_distributed", cluster=cluster, node_count=2, python_script=str(script),
                         exist_ok=True)  # fmt: skip
    job.submit()
    state = job.wait(timeout=120, raise_on_failure=True)
    cluster.resize(0)
    return state


def test_the_readme_snippet_runs_twice(ws: Workspace, script: Script) -> None:
    path = script("hello.py", "print('hello', flush=True)")
    assert tutorial_run(ws, path) is JobState.SUCCEEDED
    scalings = len(ws.get_cluster("nc6cluster").events())
    # the same job, re-attached: the cluster (at 0 since the last run) is not grown only to shrink again
    assert tutorial_run(ws, path) is JobState.SUCCEEDED
    later = ws.get_cluster("nc6cluster").events()[scalings:]
    assert [e for e in later if e["to"] > e["from"]] == [], later
    assert ws.get_cluster("nc6cluster").target_nodes == 0
    # a run that submits a new job grows it back at submit, to the size create_cluster asked for
    again = Workspace.local(root=ws.backend.root)  # type: ignore[attr-defined]
    cluster = again.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=2, exist_ok=True)
    assert cluster.target_nodes == 0
    job = again.get_experiment("cifar").create_job("second", cluster=cluster, node_count=2,
                                                   python_script=str(path))  # fmt: skip
    assert job.submit().wait(timeout=120) is JobState.SUCCEEDED
    assert again.get_cluster("nc6cluster").target_nodes == 2
    again.close()


def test_errors_name_the_way_out(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    with pytest.raises(AlreadyExistsError, match=r"get_experiment\('e'\).*exist_ok=True"):
        ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    with pytest.raises(AlreadyExistsError, match=r"get_cluster\('c'\).*exist_ok=True"):
        ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    exp.create_job("j", cluster=cluster, command_line="true").submit().wait(timeout=60)
    with pytest.raises(AlreadyExistsError, match=r"get_job\('j'\).*exist_ok=True"):
        exp.create_job("j", cluster=cluster, command_line="true")
    with pytest.raises(CapacityError) as err:
        exp.create_job("big", cluster=cluster, node_count=3, command_line="true")
    assert str(err.value) == (
        "the job needs 3 node(s) but cluster 'c' has 1: resize it (cluster.resize(3)) or ask for fewer nodes"
    )


def test_a_job_without_a_name_gets_a_unique_one(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    first = exp.create_job(cluster=cluster, command_line="true").submit()
    second = exp.create_job(cluster=cluster, command_line="true").submit()
    assert first.name != second.name and first.name.startswith("job-")
    assert {j.name for j in exp.list_jobs()} == {first.name, second.name}


def test_the_failure_reason_carries_the_failing_ranks_own_message(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    path = script(
        "boom.py",
        """
        import os, sys
        if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
            raise FileNotFoundError("could not find cifar-10-batches-py; pass --data-dir")
        import time; time.sleep(30)
    """,
    )
    job = exp.create_job("boom", cluster=cluster, node_count=2, python_script=str(path)).submit()
    with pytest.raises(JobFailedError) as err:
        job.wait(timeout=90, raise_on_failure=True)
    reason = job.status.failure_reason or ""
    assert "rank 1 on node" in reason and "FileNotFoundError: could not find cifar-10-batches-py" in reason
    assert "stderr.txt" in reason and reason in str(err.value)


def test_a_notebook_opens_the_workspace_the_cli_made(tmp_path: Path, script: Script) -> None:
    from batchai_sdk.cli import main

    assert main(["group", "create", "-n", "g", "-l", "eastus"]) == 0
    assert main(["workspace", "create", "-g", "g", "-w", "w"]) == 0
    assert main(["experiment", "create", "-g", "g", "-w", "w", "-n", "e"]) == 0
    ws = Workspace.from_cli("g", "w")
    assert [e.name for e in ws.list_experiments()] == ["e"]
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    ws.get_experiment("e").create_job("from-notebook", cluster=cluster, command_line="true").submit()
    assert main(["job", "wait", "-g", "g", "-w", "w", "-e", "e", "-n", "from-notebook"]) == 0
    with pytest.raises(Exception, match="workspace 'nope' not found"):
        Workspace.from_cli("g", "nope")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from batchai_sdk.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


G = ("-g", "g", "-w", "w")


def test_the_cli_streams_says_why_and_exits_with_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("group", "create", "-n", "g", "-l", "eastus"), ("workspace", "create", "-g", "g", "-w", "w"),
                 ("experiment", "create", *G, "-n", "e"), ("cluster", "create", *G, "-n", "c", "-s", "x", "-t", "1")):  # fmt: skip
        assert cli(capsys, *argv)[0] == 0
    code, out, _ = cli(capsys, "job", "create", *G, "-e", "e", "-c", "c", "-n", "first",
                       "--command-line", "echo one; sleep 2", "--stream")  # fmt: skip
    assert code == 0 and out.splitlines() == ["one"]
    assert (
        cli(capsys, "job", "create", *G, "-e", "e", "-c", "c", "-n", "hold", "--command-line", "sleep 2")[0]
        == 0
    )
    assert cli(capsys, "job", "create", *G, "-e", "e", "-c", "c", "-n", "later", "--command-line",
               "echo two; echo 'ValueError: bad lr' >&2; exit 5")[0] == 0  # fmt: skip
    code, out, err = cli(capsys, "job", "file", "stream", *G, "-e", "e", "-j", "later", "-f", "stdout.txt")
    # why it waits, in the stream: its place and the job that holds the node
    assert "later is queued: waiting_for_nodes (#1 in the queue)" in err and "1 busy by hold" in err
    assert out.splitlines() == ["two"] and code == 5
    assert "job later failed: " in err and "exited with code 5: ValueError: bad lr" in err
    assert "batchai job logs -g g -w w -e e -n later --file-name stderr.txt" in err
    code, _, err = cli(capsys, "job", "file", "stream", *G, "-e", "e", "-j", "later", "-f", "nope.txt")
    assert code != 0 and "nope.txt" in err and "stdout.txt" in err and "stderr.txt" in err
    code, out, err = cli(capsys, "job", "logs", *G, "-e", "e", "-n", "later", "--file-name", "stderr.txt")
    assert code == 5 and "ValueError: bad lr" in out
    code, out, _ = cli(
        capsys, "job", "create", *G, "-e", "e", "-c", "c", "--command-line", "true", "-o", "json"
    )
    assert code == 0 and json.loads(out)["name"].startswith("job-")


def test_the_cli_creates_and_changes_autoscale_clusters(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "group", "create", "-n", "g", "-l", "eastus")[0] == 0
    assert cli(capsys, "workspace", "create", "-g", "g", "-w", "w")[0] == 0
    code, out, _ = cli(
        capsys, "cluster", "create", *G, "-n", "a", "-s", "x", "--min", "0", "--max", "3", "-o", "json"
    )
    view = json.loads(out)
    assert code == 0 and view["scaleSettings"] == {
        "autoScale": {"minimumNodeCount": 0, "maximumNodeCount": 3, "initialNodeCount": 0}
    }
    assert view["targetNodeCount"] == 0 and view["pricePerNodeHour"] == "$0.00/h"
    code, out, _ = cli(
        capsys, "cluster", "auto-scale", *G, "-n", "a", "--min", "1", "--max", "2", "-o", "json"
    )
    assert code == 0 and json.loads(out)["scaleSettings"]["autoScale"]["maximumNodeCount"] == 2
    code, out, _ = cli(capsys, "cluster", "resize", *G, "-n", "a", "-t", "2", "-o", "json")
    assert json.loads(out)["scaleSettings"] == {"manual": {"targetNodeCount": 2}}


def test_a_project_of_several_files_runs_from_its_code_dir(ws: Workspace, tmp_path: Path) -> None:
    from batchai_sdk import ValidationError

    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "helper.py").write_text("def greet():\n    return 'hello from helper'\n")
    (project / "train.py").write_text("from helper import greet\nprint(greet(), flush=True)\n")
    (project / "data" / "big.bin").write_bytes(b"0" * 1024)
    (project / ".batchaiignore").write_text("data/\n")
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job(
        "proj", cluster=cluster, node_count=2, source_dir=project, python_script="train.py"
    ).submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.tail("stdout.txt") == ["hello from helper", "hello from helper"]
    staged = {p.name for p in ws.share.list(job.paths.wd)}
    assert {"train.py", "helper.py"} <= staged and "data" not in staged
    with pytest.raises(ValidationError, match="python_script"):
        exp.create_job("x", cluster=cluster, source_dir=project, python_script="../outside.py")


def test_the_cli_answers_like_az(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys)
    assert code == 0 and "COMMAND" in out and "cluster" in out
    for argv in (("file-server", "list", "-g", "g"), ("cluster", "node", "exec", "-n", "c"),
                 ("cluster", "create", "-n", "c", "--user-assigned-identity", "x")):  # fmt: skip
        code, _, err = cli(capsys, *argv)
        assert code == 2 and "is not supported by batchai (see docs/cli.md" in err, err


def test_vm_size_is_optional_where_machines_are_what_they_are(ws: Workspace) -> None:
    cluster = ws.create_cluster("plain", nodes=2)
    assert cluster.vm_size == "local" and cluster.target_nodes == 2


def test_the_local_backend_does_not_change_this_machine_unasked(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    job = exp.create_job("tutorial-like", cluster=cluster, python_script=str(script("h.py", "print('ran')")),
                         job_preparation="apt update; apt install mpi-default-dev -y; pip install keras horovod",
                         container_image="tensorflow/tensorflow:1.8.0-gpu").submit()  # fmt: skip
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert job.tail("stdout.txt") == ["ran"]
    notes = [line for line in job.tail("stderr.txt", 20) if line.startswith("note:")]
    assert len(notes) == 2 and "job preparation skipped" in notes[0] and "allow_host_changes=True" in notes[0]
    assert "containerSettings skipped: image tensorflow/tensorflow:1.8.0-gpu" in notes[1]
    assert not any(p.name.startswith("stdout-job_prep") for p in job.files())  # nothing was run
    harmless = exp.create_job(
        "data", cluster=cluster, command_line="true", job_preparation="mkdir -p /tmp/x"
    ).submit()
    assert harmless.wait(timeout=60) is JobState.SUCCEEDED
    assert not [line for line in harmless.tail("stderr.txt", 20) if line.startswith("note:")]
