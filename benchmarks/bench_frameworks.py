"""Horovod + TensorFlow 2.15 against PyTorch DDP, side by side in one run: the tutorial's CNN on the same
data (scikit-learn's digits), the same epochs, 2 ranks on 2 local nodes, each submitted as a job.

Prints for each: images/s (the ranks together, median over epochs after the first), seconds from submit to
the first epoch line, seconds per epoch, the final test accuracy, and the torch/Horovod ratios.

    python benchmarks/bench_frameworks.py [--epochs 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from batchai_sdk import JobState, Workspace


def run(ws: Workspace, name: str, epochs: int, **job: Any) -> dict[str, float]:
    exp = ws.create_experiment("bench", exist_ok=True)
    cluster = ws.create_cluster("c", nodes=2, exist_ok=True)
    out = f"$AZ_BATCHAI_JOB_MOUNT_ROOT/bench/{name}"
    args = ["--dir", out, "--dataset", "digits", "--epochs", str(epochs), "--seed", "1"]
    handle = exp.create_job(name, cluster=cluster, node_count=2, args=args + job.pop("extra", []), **job)
    t0 = time.perf_counter()
    handle.submit()
    first = None
    accuracy = float("nan")
    for line in handle.stream("stdout.txt", poll_interval=0.1):
        if first is None and line.startswith("Epoch 1/"):
            first = time.perf_counter() - t0
        if line.startswith("Test accuracy:"):
            accuracy = float(line.split(":", 1)[1])
    assert handle.wait() is JobState.SUCCEEDED, handle.status.failure_reason
    metrics = [json.loads(x) for x in ws.share.read_text(f"bench/{name}/metrics.jsonl").splitlines()]
    later = metrics[1:] or metrics
    return {
        "images_per_sec": statistics.median(m["images_per_sec"] for m in later),
        "first_epoch_line_s": first or float("nan"),
        "seconds_per_epoch": statistics.median(m["seconds"] for m in later),
        "accuracy": accuracy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=4)
    opts = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace.local(root=Path(tmp) / "ws")
        hvd = run(ws, "horovod", opts.epochs, python_script="batchai_sdk.train.cifar10")
        torch_extra = ["--lr", "0.001", "--warmup-epochs", "0"]
        torch = run(
            ws,
            "torch",
            opts.epochs,
            toolkit="pytorch",
            python_script="batchai_sdk.train.cifar10_torch",
            extra=torch_extra,
        )
        ws.close()
    print(f"the tutorial's CNN, digits, {opts.epochs} epochs, 2 ranks on 2 local nodes (CPU)")
    print(f"{'':<28}{'Horovod+TF 2.15':>16}{'torch DDP':>12}{'torch/hvd':>11}")
    rows = (
        ("images_per_sec", "images/s (2 ranks)"),
        ("first_epoch_line_s", "submit -> epoch 1 line, s"),
        ("seconds_per_epoch", "seconds per epoch"),
        ("accuracy", "test accuracy"),
    )
    for key, label in rows:
        ratio = torch[key] / hvd[key] if hvd[key] else float("nan")
        print(f"{label:<28}{hvd[key]:>16.3f}{torch[key]:>12.3f}{ratio:>10.2f}x")


if __name__ == "__main__":
    main()
