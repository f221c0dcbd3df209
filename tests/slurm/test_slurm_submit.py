"""The object model's own submit, terminate and status reach Slurm (no scheduler of ours in between)."""

from __future__ import annotations

from datetime import timedelta
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


def test_the_tutorial_commands_on_a_slurm_profile(
    slurm_ws: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """batchai configure --backend slurm, then the tutorial's commands: a job.json through sbatch."""
    import json
    import shutil

    from batchai_sdk.cli import main

    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    share_root = tmp_path / "shared"
    share_root.mkdir()
    partition = slurm_ws.backend.partition  # type: ignore[attr-defined]
    assert (
        main(["configure", "--backend", "slurm", "--share-root", str(share_root), "--partition", partition])
        == 0
    )
    assert main(["group", "create", "-n", "g", "-l", "eastus"]) == 0
    assert main(["workspace", "create", "-g", "g", "-w", "w"]) == 0
    assert main(["experiment", "create", "-g", "g", "-w", "w", "-n", "e"]) == 0
    assert main(["cluster", "create", "-g", "g", "-w", "w", "-n", "cpu", "-s", "slurm", "-t", "1"]) == 0
    script = tmp_path / "hello.py"
    script.write_text("print('hello from slurm', flush=True)\n")
    job_json = tmp_path / "job.json"
    job_json.write_text(json.dumps({"properties": {"nodeCount": 1, "customToolkitSettings": {
        "commandLine": f"{shutil.which('python3') or 'python3'} {script}"}}}))  # fmt: skip
    create = ["job", "create", "-g", "g", "-w", "w", "-e", "e", "-c", "cpu", "-n", "j", "-f", str(job_json)]
    assert main([*create, "--stream"]) == 0
    assert (share_root / "g" / "w").is_dir()


ALLREDUCE = """
import os, torch, torch.distributed as dist
dist.init_process_group(backend=os.environ["AZ_BATCHAI_PYTORCH_BACKEND"],
                        init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
t = torch.tensor([float(os.environ["RANK"]) + 1])
dist.all_reduce(t)
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} sum={t.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.train
def test_a_two_process_torch_job_runs_through_sbatch(slurm_ws: object, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ws = slurm_ws
    exp = ws.create_experiment("e")  # type: ignore[attr-defined]
    cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=1)  # type: ignore[attr-defined]
    script = tmp_path / "ddp.py"
    script.write_text(ALLREDUCE)
    job = exp.create_job(
        "ddp", cluster=cluster, toolkit="pytorch", process_count=2, python_script=str(script)
    )
    job.submit()
    assert job.wait(timeout=180) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(job.tail("stdout.txt", 10)) == ["rank 0 of 2 sum=3", "rank 1 of 2 sum=3"]


@pytest.mark.train
def test_the_tutorial_job_json_runs_through_sbatch(
    slurm_ws: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's job.json, unchanged but for the node count this one-node Slurm has: job preparation
    (stand-in apt/pip), 2 Horovod ranks through srun, the logs under stdOutErrPathPrefix."""
    import os
    import sys

    from _stand_ins import TUTORIAL_SCRIPT, stand_in_tools
    from batchai_sdk.batchai_json import parse_job_json

    pytest.importorskip("horovod.tensorflow")
    log = tmp_path / "tools.log"
    venv_bin = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{stand_in_tools(tmp_path / 'bin', log)}:{venv_bin}:{os.environ['PATH']}")
    ws = slurm_ws
    exp = ws.create_experiment("cifar")  # type: ignore[attr-defined]
    cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=1)  # type: ignore[attr-defined]
    ws.share.mkdir("cifar")  # type: ignore[attr-defined]
    (tmp_path / "cifar_cnn_distributed.py").write_text(TUTORIAL_SCRIPT)
    ws.share.upload(tmp_path / "cifar_cnn_distributed.py", "cifar/cifar_cnn_distributed.py")  # type: ignore[attr-defined]
    seed = Path(__file__).parent.parent / "data" / "tutorial_job.json"
    spec = parse_job_json(seed, name="cifar_distributed", experiment="cifar", cluster=cluster.name,
                          storage_account="mystorageaccount")  # fmt: skip
    job = exp.job_from_spec(spec.replace(node_count=1, process_count=2)).submit()
    assert job.wait(timeout=300) is JobState.SUCCEEDED, job.status.failure_reason
    lines = sorted(line for line in job.stream("stdout.txt", follow=False) if line.startswith("rank"))
    assert lines == [f"rank {r} of 2: 2 ranks answered" for r in range(2)]
    assert ws.share.exists("cifar/experiments/cifar/jobs/cifar_distributed/stdouterr/stdout.txt")  # type: ignore[attr-defined]
    assert "pip install keras horovod" in log.read_text().splitlines()


def test_a_job_pending_behind_a_running_one_runs_when_it_ends(slurm_ws: object, tmp_path: Path) -> None:
    ws = slurm_ws
    exp = ws.create_experiment("e")  # type: ignore[attr-defined]
    cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=1)  # type: ignore[attr-defined]
    first = exp.create_job("first", cluster=cluster, node_count=1, process_count=2,  # both CPUs
                           command_line="sleep 3; echo first").submit()  # fmt: skip
    second = exp.create_job("second", cluster=cluster, process_count=2, command_line="echo second").submit()
    assert first.wait(timeout=120) is JobState.SUCCEEDED, first.status.failure_reason
    assert second.wait(timeout=120) is JobState.SUCCEEDED, second.status.failure_reason
    first_end, second_start = first.status.end_time, second.status.start_time
    assert first_end is not None and second_start is not None
    assert second_start >= first_end - timedelta(seconds=1)  # it waited for the node, then ran
