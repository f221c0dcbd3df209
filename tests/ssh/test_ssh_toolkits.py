"""PyTorch DDP and a project of several files over real sshd nodes, through the cluster's scheduler."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES

from _labs import ssh_lab
from batchai_sdk import JobState, Workspace

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

DDP = """
    import hashlib, os, sys, time, torch, torch.distributed as dist
    dist.init_process_group(backend=os.environ["AZ_BATCHAI_PYTORCH_BACKEND"],
                            init_method=os.environ["AZ_BATCHAI_PYTORCH_INIT_METHOD"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(int(os.environ["RANK"]))  # each rank starts from different weights
    model = torch.nn.Linear(8, 2)
    ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randn(16, 8)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    print(f"rank {os.environ['RANK']} node {os.environ['NODE_RANK']} weights {digest}", flush=True)
    dist.destroy_process_group()
    time.sleep(0.2)  # Gloo's threads finish before Python finalizes (pytorch/pytorch#190489; docs/toolkits.md)
"""


lab = ssh_lab(NODE_ADDRESSES[:2], "toolkits")


@pytest.mark.parametrize("processes", [2, 4])
def test_pytorch_ddp_over_two_sshd_nodes_ends_with_identical_weights(
    lab: Workspace, tmp_path: Path, processes: int
) -> None:
    pytest.importorskip("torch")
    exp = lab.create_experiment("e", exist_ok=True)
    cluster = lab.create_cluster("c", vm_size="Standard_NC6", nodes=2, exist_ok=True)
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP))
    job = exp.create_job(f"ddp{processes}", cluster=cluster, node_count=2, toolkit="pytorch",
                         process_count=processes, python_script=str(script),
                         environment={"GLOO_SOCKET_IFNAME": "lo"}).submit()  # fmt: skip
    assert job.wait(timeout=240) is JobState.SUCCEEDED, job.status.failure_reason
    lines = sorted(job.tail("stdout.txt", 10))
    assert len(lines) == processes
    assert {line.split(" node ")[1].split()[0] for line in lines} == {"0", "1"}  # both nodes ran ranks
    assert len({line.rsplit(" ", 1)[1] for line in lines}) == 1  # bit-identical weights on every rank


def test_a_project_with_a_sibling_import_runs_from_its_source_dir_on_two_nodes(
    lab: Workspace, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / "big").mkdir(parents=True)
    (project / "helper.py").write_text("def greet():\n    return 'hello from helper'\n")
    (project / "train.py").write_text("import socket\nfrom helper import greet\nprint(greet(), flush=True)\n")
    (project / "big" / "data.bin").write_bytes(b"0" * 4096)
    (project / ".batchaiignore").write_text("big/\n")
    exp = lab.create_experiment("e", exist_ok=True)
    cluster = lab.create_cluster("c", vm_size="Standard_NC6", nodes=2, exist_ok=True)
    job = exp.create_job("project", cluster=cluster, node_count=2, source_dir=project,
                         python_script="train.py").submit()  # fmt: skip
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert job.tail("stdout.txt") == ["hello from helper", "hello from helper"]
    assert "big" not in {p.name for p in lab.share.list(job.paths.wd)}
