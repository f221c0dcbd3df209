"""The object model's own submit, terminate and status reach Slurm (no scheduler of ours in between)."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchai_sdk import AlreadyExistsError, JobState

pytestmark = pytest.mark.slurm


def test_job_submit_runs_through_sbatch_and_reports_its_outcome(slurm_ws: object, tmp_path: Path) -> None:
    ws = slurm_ws
    exp = ws.create_experiment("e")  # type: ignore[attr-defined]
    cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=1)  # type: ignore[attr-defined]
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('hello from', os.environ['AZ_BATCHAI_TASK_INDEX'], flush=True)\n")
    job = exp.create_job("hello", cluster=cluster, python_script=str(script)).submit()
    with pytest.raises(AlreadyExistsError):
        exp.create_job("hello", cluster=cluster, python_script=str(script)).submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert any("hello from" in line for line in job.tail("stdout.txt"))
    failing = tmp_path / "fail.py"
    failing.write_text("import sys\nsys.exit(3)\n")
    bad = exp.create_job("bad", cluster=cluster, python_script=str(failing)).submit()
    assert bad.wait(timeout=120) is JobState.FAILED
    assert bad.exit_code == 3
