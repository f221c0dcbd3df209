"""A ``requirements.txt`` in ``source_dir`` is acted on: installed by the job's preparation into a venv of
the job's own (``--system-site-packages``, cached by hash on the node), or refused at submit with the
reason and the switch. Offline: the requirement is a wheel in the project folder (``--no-index
--find-links wheels``), built here by hand; real pip, real venvs, real local jobs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from batchai_sdk import JobState, ValidationError, Workspace
from batchai_sdk.cli import main
from wheels import tiny_project

pytestmark = pytest.mark.mpi


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tiny_project(tmp_path / "proj")


def test_requirements_are_installed_into_a_cached_venv_of_the_job(ws: Workspace, project: Path) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    first = exp.create_job("first", cluster=cluster, source_dir=project, python_script="train.py").submit()
    assert first.wait(timeout=180) is JobState.SUCCEEDED, (
        first.status.failure_reason,
        first.tail("stderr.txt"),
    )
    words = first.tail()[0].split()
    assert words[:2] == ["tinypkg", "42"] and "/venvs/" in words[3]  # the job's own venv
    started = time.monotonic()
    second = exp.create_job("second", cluster=cluster, source_dir=project, python_script="train.py").submit()
    assert second.wait(timeout=120) is JobState.SUCCEEDED, second.status.failure_reason
    assert second.tail()[0] == first.tail()[0]  # the same venv, by the requirements' hash: reused
    prep = [f.name for f in second.files() if f.name.startswith("stdout-job_prep-")]
    assert prep and any("requirements: reusing" in line for line in second.tail(prep[0], 5))
    assert time.monotonic() - started < 60

    # the switch: the requirements are there already (they are not: the script fails on the import)
    skip = exp.create_job("skip", cluster=cluster, source_dir=project, python_script="train.py",
                          install_requirements=False).submit()  # fmt: skip
    assert skip.wait(timeout=120) is JobState.FAILED
    assert "ModuleNotFoundError: No module named 'tinypkg'" in (skip.status.failure_reason or "")

    # a requirement pip cannot install fails the job's preparation, saying so
    (project / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==9.9\n")
    bad = exp.create_job("bad", cluster=cluster, source_dir=project, python_script="train.py").submit()
    assert bad.wait(timeout=120) is JobState.FAILED
    errors = [f.name for f in bad.files() if f.name.startswith("stderr-job_prep-")]
    assert any("requirements: pip failed" in line for line in bad.tail(errors[0], 5))


def test_requirements_a_job_cannot_install_are_refused_at_submit_with_the_switch(
    ws: Workspace, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    with pytest.raises(ValidationError, match=r"install_requirements.*container.*install_requirements=False"):
        exp.create_job("boxed", cluster=cluster, source_dir=project, python_script="train.py",
                       container_image="python:3.11")  # fmt: skip
    monkeypatch.chdir(tmp_path)
    code = main(["job", "create", "--root", str(tmp_path / "ws"), "-e", "e", "-c", "c", "--source-dir", "proj",
                 "--python-script", "train.py", "--no-install-requirements", "-o", "none"])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def test_pyproject_dependencies_are_installed_too(ws: Workspace, project: Path) -> None:
    (project / "requirements.txt").unlink()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "proj"\nversion = "0"\ndependencies = ["tinypkg==1.0"]\n'
    )
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    # offline: pip's own variables, in the job's environment, point it at the wheels shipped with the project
    job = exp.create_job("pyproject", cluster=cluster, source_dir=project, python_script="train.py",
                         environment={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "wheels"}).submit()  # fmt: skip
    assert job.wait(timeout=180) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.tail()[0].split()[:2] == ["tinypkg", "42"]
