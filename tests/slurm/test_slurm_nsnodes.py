"""Slurm across nodes that are separate machines (tests/nsnodes.py): slurmd on node1 and node2,
slurmctld on node3 (the login node). Two slurmd on one host cannot run a multi-node ``srun`` ("Node 0
already established stream"); here they can, so the Slurm backend's multi-node path runs: a 2-node
Horovod job (``srun --mpi=pmix``), a 2-node PyTorch DDP job, and the SSH login-host path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_daemons import SlurmCluster

from batchai_sdk import JobState, Workspace
from nsnodes import NSNodes

pytestmark = [pytest.mark.slurm, pytest.mark.nsnodes]


def test_sbatch_n2_runs_srun_on_both_nodes(ns_slurm: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    ns_slurm.command("sbatch", "-N2", "--wait", f"--output={out}", "--wrap", "srun -N2 hostname", timeout=120)
    assert sorted(out.read_text().split()) == ["node1", "node2"]


HOROVOD = """
import socket
import horovod.tensorflow as hvd
import tensorflow as tf
hvd.init()
total = hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum)
print(f"rank {hvd.rank()} of {hvd.size()} on {socket.gethostname()} sum={float(total):g}", flush=True)
"""

DDP = """
import os, socket, time, torch, torch.distributed as dist
dist.init_process_group(backend=os.environ["AZ_BATCHAI_PYTORCH_BACKEND"],
                        init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
loss = model(torch.ones(4, 2) * (int(os.environ["RANK"]) + 1)).sum()
loss.backward()  # DDP averages the gradients of both ranks
grad = model.module.weight.grad[0, 0].item()
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on {socket.gethostname()} grad={grad:g}", flush=True)
dist.destroy_process_group()
time.sleep(0.2)  # Gloo's threads finish before Python finalizes (pytorch/pytorch#190489)
"""


def slurm_workspace(ns_slurm: SlurmCluster, root: Path, **options: Any) -> Workspace:
    share = root / "share"
    share.mkdir(parents=True)
    return Workspace.slurm(
        "nsslurm",
        share_path=str(share),
        partition=ns_slurm.partition,
        python=sys.executable,
        env=ns_slurm.env,  # this Slurm's SLURM_CONF, for its commands and the jobs
        **options,
    )


@pytest.fixture
def ws(ns_slurm: SlurmCluster, tmp_path: Path) -> Iterator[Workspace]:
    """This machine is the login node: Slurm's commands run here and reach slurmctld on node3."""
    ns_slurm.wait_idle()
    workspace = slurm_workspace(ns_slurm, tmp_path)
    yield workspace
    ns_slurm.cancel_all()
    workspace.close()


@pytest.mark.train
@pytest.mark.parametrize(
    ("toolkit", "module", "source", "expected"),
    [
        (
            "horovod",
            "horovod.tensorflow",
            HOROVOD,
            ["rank 0 of 2 on node1 sum=3", "rank 1 of 2 on node2 sum=3"],
        ),
        # each rank's gradient is 4 x (its rank + 1); DDP gives both the mean of the two: (4 + 8) / 2
        ("pytorch", "torch", DDP, ["rank 0 of 2 on node1 grad=6", "rank 1 of 2 on node2 grad=6"]),
    ],
)
def test_a_two_node_training_job_runs_a_rank_on_each_node(
    ws: Workspace, tmp_path: Path, toolkit: str, module: str, source: str, expected: list[str]
) -> None:
    """Horovod through ``srun --mpi=pmix`` (the backend's default), PyTorch DDP through srun's tasks."""
    pytest.importorskip(module)
    script = tmp_path / "train.py"
    script.write_text(source)
    cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=2)
    job = ws.create_experiment("e").create_job(
        toolkit, cluster=cluster, toolkit=toolkit, node_count=2, process_count=2, python_script=str(script)
    )
    job.submit()
    assert job.wait(timeout=300) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(line for line in job.tail("stdout.txt", 20) if line.startswith("rank")) == expected
    assert sorted(job.status.nodes) == ["node1", "node2"]


def test_the_login_host_path_submits_over_ssh_to_a_login_node(
    ns_slurm: SlurmCluster, ns_nodes: NSNodes, tmp_path: Path
) -> None:
    """Workspace.slurm(login_host=...): sbatch, squeue and the share (SFTP) all on node3, the login node
    in its own namespaces; the job runs on node1 and node2."""
    ns_slurm.wait_idle()
    login = ns_nodes["node3"]
    ws = slurm_workspace(
        ns_slurm, tmp_path, login_host=login.address, user="root", key_file=ns_nodes.key_file,
        known_hosts=tmp_path / "known_hosts", trust_on_first_use=True,
    )  # fmt: skip
    try:
        script = tmp_path / "hosts.py"
        script.write_text(
            "import os, socket\n"
            "print(socket.gethostname(), 'submitted from', os.environ['SLURM_SUBMIT_HOST'], flush=True)\n"
        )
        cluster = ws.create_cluster("cpu", vm_size="slurm", nodes=2)
        job = (
            ws.create_experiment("e")
            .create_job("hosts", cluster=cluster, node_count=2, process_count=2, python_script=str(script))
            .submit()
        )
        assert job.wait(timeout=180) is JobState.SUCCEEDED, job.status.failure_reason
        # sbatch ran on the login node (Slurm tells each rank where its job was submitted from)
        assert sorted(job.tail("stdout.txt", 10)) == [
            "node1 submitted from node3",
            "node2 submitted from node3",
        ]
    finally:
        ns_slurm.cancel_all()
        ws.close()
