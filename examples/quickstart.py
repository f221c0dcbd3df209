"""The Batch AI Horovod tutorial, end to end, on this machine (the embedded local backend, offline).

Workspace → experiment → 2-node cluster → the shipped training module on the digits images with 2 Horovod
ranks over MPI → stream its stdout → download the model → print its test accuracy → scale to zero.

    python examples/quickstart.py [--root ./.batchai] [--epochs 6]
"""

from __future__ import annotations

import argparse
import time

from batchai_sdk import JobState, Workspace
from batchai_sdk.train import module_path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default="./.batchai", help="workspace folder (default: ./.batchai)")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of the local cluster (default: 2)")
    parser.add_argument("--epochs", type=int, default=6, help="training epochs (default: 6)")
    parser.add_argument("--model", default="./model.h5", help="where to save the model (default: ./model.h5)")
    opts = parser.parse_args()

    ws = Workspace.local(root=opts.root)  # az batchai workspace create
    exp = ws.create_experiment("cifar", exist_ok=True)  # az batchai experiment create
    cluster = ws.create_cluster(  # az batchai cluster create --vm-size ... --target N
        "nc6cluster", nodes=opts.nodes, vm_priority="dedicated", exist_ok=True
    )  # exist_ok: an earlier run's cluster; resized to 0, it grows back when the job is submitted
    cluster.wait_until_steady(timeout=60)
    print(f"cluster {cluster.name}: {cluster.state} {cluster.node_counts}")

    # az storage directory create / file upload: the training script goes onto the share
    ws.share.mkdir("cifar")
    ws.share.upload(module_path("cifar10"), "cifar/cifar_cnn_distributed.py")

    name = time.strftime("cifar_distributed_%Y%m%d_%H%M%S")
    out_dir = f"$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/{name}"
    job = exp.create_job(  # az batchai job create --config-file job.json
        name,
        cluster=cluster,
        node_count=opts.nodes,
        python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/cifar_cnn_distributed.py",
        args=[
            "--dir",
            out_dir,
            "--dataset",
            "digits",
            "--epochs",
            str(opts.epochs),
            "--lr",
            "0.001",
            "--seed",
            "1",
        ],
        std_out_err_path_prefix="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar",
    )
    job.submit()
    print(f"job {name}: {job.state}; streaming stdout.txt (az batchai job file stream)")
    accuracy = None
    for line in job.stream("stdout.txt"):  # follows until the job ends
        print("  |", line)
        if line.startswith("Test accuracy:"):
            accuracy = float(line.split(":", 1)[1])
    state = job.wait()
    print(f"job {name}: {state} (exit code {job.exit_code})")
    for f in job.files():  # az batchai job file list
        print(f"  {f.name:<48} {f.type:<9} {f.size or 0:>9}")
    if state is not JobState.SUCCEEDED:
        print(f"failure: {job.status.failure_reason}")
        print("\n".join(job.tail("stderr.txt", 30)))
        return 1

    # az storage file download
    model = ws.share.download(f"cifar/{name}/saved_models/keras_cifar10_trained_model.h5", opts.model)
    print(f"model downloaded to {model} ({model.stat().st_size} bytes); test accuracy {accuracy}")

    cluster.resize(0)  # az batchai cluster resize --target 0
    print(f"cluster {cluster.name} resized to 0: {cluster.node_counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
