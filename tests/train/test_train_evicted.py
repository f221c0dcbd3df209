"""Issue 13 end to end with the shipped training modules: one of a 2-node job's nodes is evicted mid-training
(``cluster.simulate_eviction``) and the job is requeued, restarted, resumed from its checkpoint on the share,
and succeeds with a clean run's accuracy, having redone at most one epoch. Real mpirun (Horovod + TF) and
real DDP ranks (torch, gloo) on the local backend's 2-node cluster."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.job import Job

pytestmark = [pytest.mark.train, pytest.mark.mpi]
OUT = "evicted"  # the job's --dir, under the share

# Settings measured to reach >= 0.95 on the digits test set for several seeds (docs/survive.md).
TF_ARGS = ["--dataset", "digits", "--epochs", "4", "--lr", "3e-4", "--warmup-epochs", "1", "--no-augmentation",
           "--seed", "2"]  # fmt: skip
TORCH_ARGS = ["--dataset", "digits", "--epochs", "5", "--lr", "3e-4", "--warmup-epochs", "1", "--no-augmentation",
              "--seed", "2"]  # fmt: skip


@dataclass(frozen=True)
class Module:
    name: str
    needs: tuple[str, ...]
    args: list[str]
    epoch_done: re.Pattern[str]  # a line of stdout that says an epoch ended; group 1: its number
    resumed: re.Pattern[str]  # attempt 2's line that names the checkpoint epoch it resumed from


TF = Module(
    "cifar10",
    ("tensorflow", "horovod.tensorflow.keras", "sklearn"),
    TF_ARGS,
    # Keras (verbose 2) prints "Epoch N/E" when an epoch starts and "S/S - ... val_accuracy ..." when it
    # ends; the metrics logger's line is not on stdout, so an epoch counts as ended at its summary line.
    re.compile(r"^Epoch (\d+)/\d+\n(?:(?!Epoch \d+/)[^\n]*\n)*?\d+/\d+ - [^\n]*val_accuracy", re.M),
    re.compile(r"^Resumed from epoch (\d+)", re.M),
)
TORCH = Module(
    "cifar10_torch",
    ("torch", "sklearn"),
    TORCH_ARGS,
    re.compile(r"^Epoch (\d+)/\d+ - loss", re.M),
    re.compile(r"^resuming from checkpoint epoch (\d+)", re.M),
)


def _submit(ws: Workspace, module: Module) -> Job:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=2)
    args = ["--dir", f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{OUT}", *module.args]
    if module is TF:  # a Horovod job over mpirun, the module uploaded at submit
        job = exp.create_job("tf", cluster=cluster, node_count=2, python_script="batchai_sdk.train.cifar10",
                             args=args, max_retries=0)  # fmt: skip
    else:  # pyTorchSettings: one DDP rank per node, the module's one-file bundle uploaded at submit
        job = exp.create_job("torch", cluster=cluster, node_count=2, toolkit="pytorch",
                             python_script="batchai_sdk.train.cifar10_torch", args=args,
                             max_retries=0)  # fmt: skip
    return job.submit()


def _epochs_logged(ws: Workspace) -> list[int]:
    path = f"{OUT}/metrics.jsonl"
    if not ws.share.exists(path):
        return []
    return [json.loads(line)["epoch"] for line in ws.share.read_text(path).splitlines() if line.strip()]


def _wait_for(condition: object, timeout: float, what: str, job: Job) -> float:
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            pytest.fail(f"timed out after {timeout}s waiting for {what}; job {job.state}:\n"
                        + "\n".join(job.tail("stderr.txt", 30)))  # fmt: skip
        if job.state in (JobState.FAILED, JobState.SUCCEEDED):
            pytest.fail(f"job ended {job.state} ({job.status.failure_reason}) before {what}")
        time.sleep(0.2)
    return time.monotonic() - start


# 1 to 3.5 min each on 2 cores at a load average under 8, but 8 to 12 min at 15 to 30: generous limits.
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("module", [TF, TORCH], ids=lambda m: m.name)
def test_an_evicted_node_mid_training_requeues_resumes_and_reaches_a_clean_runs_accuracy(
    ws: Workspace, module: Module
) -> None:
    for name in module.needs:
        pytest.importorskip(name)
    started = time.monotonic()
    job = _submit(ws, module)
    _wait_for(lambda: len(_epochs_logged(ws)) >= 1, 900, "the first epoch's metrics line", job)
    node = job.status.nodes[1]
    assert ws.get_cluster("c").simulate_eviction(node, grace_seconds=30) == f"e/{job.name}"
    notice = time.monotonic()
    requeued = _wait_for(lambda: len(job.attempts) >= 1, 120, "the requeue", job)  # 42 s at load 25
    assert job.wait(timeout=1200) is JobState.SUCCEEDED, (
        job.status.failure_reason,
        job.tail("stderr.txt", 40),
    )

    first, second = job.attempts
    assert first["cause"] == "evicted" and first["extra"]["evictions"][0]["node"] == node, first
    assert "evictions do not count against max_retries" in first["reason"]  # max_retries=0: none spent
    assert (second["index"], second["cause"], second["exit_code"]) == (1, "exit", 0), second
    logs1 = "\n".join(job.tail("attempt-1/stdout.txt", 400))
    logs2 = "\n".join(job.tail("stdout.txt", 400))
    report = f"--- attempt 1\n{logs1}\n--- attempt 2\n{logs2}"
    assert "Restart 1 (AZ_BATCHAI_JOB_RESTART_COUNT=1)" in logs2, report
    assert "Restart " not in logs1, report

    # Each epoch once in the metrics; attempt 2 resumed from the last epoch attempt 1 ended (or later,
    # for TF's mid-epoch checkpoint), so no finished epoch was run again.
    total = int(module.args[module.args.index("--epochs") + 1])
    assert _epochs_logged(ws) == list(range(1, total + 1))
    done1 = [int(n) for n in module.epoch_done.findall(logs1)]
    done2 = [int(n) for n in module.epoch_done.findall(logs2)]
    assert done1 and done1 == list(range(1, len(done1) + 1)), report
    resumed = [int(n) for n in module.resumed.findall(logs2)]
    assert resumed and resumed[0] >= done1[-1], report
    assert set(done1) & set(done2) == set(), report  # no ended epoch ran again
    assert sorted(done1 + done2) == list(range(1, total + 1)), report
    # At most the one interrupted epoch is redone: its partial work is all a restart loses.
    assert done2[0] == done1[-1] + 1, report
    accuracy = float(re.findall(r"^Test accuracy:? ([0-9.]+)$", logs2, re.M)[-1])
    assert accuracy >= 0.95, report
    print(f"\n{module.name}: eviction after epoch(s) {done1} -> requeued {requeued:.1f}s after the notice; "
          f"resumed from epoch {resumed[0]}; epochs of attempt 2 {done2}; test accuracy {accuracy:.4f}; "
          f"{time.monotonic() - started:.0f}s in all ({time.monotonic() - notice:.0f}s after the notice)")  # fmt: skip
