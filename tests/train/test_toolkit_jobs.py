"""Batch AI's other toolkits through the cluster scheduler, end to end with real processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

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
