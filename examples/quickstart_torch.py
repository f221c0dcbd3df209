"""The tutorial's CNN in PyTorch DDP, end to end, on this machine (the local backend, offline).

Workspace → experiment → 2-node cluster → ``batchai_sdk.train.cifar10_torch`` on the digits images with 2
DDP ranks (gloo) and the module's digits recipe (about 0.98 test accuracy after 10 epochs) → stream its
stdout → print its test accuracy → scale to zero. The module is uploaded as the one file
``module_path("cifar10_torch")`` bundles, so the nodes need torch and numpy, not batchai_sdk.

    python examples/quickstart_torch.py [--root ./.batchai] [--epochs 10]
"""

from __future__ import annotations

import argparse
import time

from batchai_sdk import JobState, Workspace


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default="./.batchai", help="workspace folder (default: ./.batchai)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of the local cluster (default: 2)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs (default: 10)")
    opts = parser.parse_args()

    ws = Workspace.local(root=opts.root)
    exp = ws.create_experiment("cifar_torch", exist_ok=True)
    cluster = ws.create_cluster("cpu", nodes=opts.nodes, exist_ok=True)
    name = time.strftime("cifar_torch_%Y%m%d_%H%M%S")
    job = exp.create_job(
        name,
        cluster=cluster,
        node_count=opts.nodes,
        toolkit="pytorch",  # pyTorchSettings: RANK, WORLD_SIZE, MASTER_ADDR/PORT on every rank
        python_script="batchai_sdk.train.cifar10_torch",
        args=[
            "--dir",
            f"$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar_torch/{name}",
            "--dataset",
            "digits",
            "--epochs",
            str(opts.epochs),  # --lr, --warmup-epochs: the module's digits recipe
            "--seed",
            "1",
        ],
    )
    job.submit()
    print(f"job {name}: {job.state}; streaming stdout.txt")
    accuracy = None
    for line in job.stream("stdout.txt"):
        print("  |", line)
        if line.startswith("Test accuracy:"):
            accuracy = float(line.split(":", 1)[1])
    state = job.wait()
    print(f"job {name}: {state} (exit code {job.exit_code})")
    if state is not JobState.SUCCEEDED:
        print(f"failure: {job.status.failure_reason}")
        return 1
    print(f"test accuracy: {accuracy}")
    cluster.resize(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
