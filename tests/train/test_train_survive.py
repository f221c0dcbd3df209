"""cifar10.py survives: SIGTERM to one node's rank mid-epoch checkpoints on every rank's agreement, a restart
(AZ_BATCHAI_JOB_RESTART_COUNT, no --resume) continues from that step, SIGUSR1 dumps stacks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("horovod.tensorflow.keras")
pytest.importorskip("sklearn")

from batchai_sdk.node.job.stacks import JOB_TAG_VARIABLE, find_job_python_pids  # noqa: E402

pytestmark = pytest.mark.train

DIGITS_ARGS = ["--dataset", "digits", "--lr", "3e-4", "--warmup-epochs", "1", "--no-augmentation", "--seed", "2",
               "--save-rank-weights"]  # fmt: skip
STEPS_PER_EPOCH = 23  # ceil(1438 digits / (2 ranks x 32))


def _epochs_logged(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["epoch"] for line in path.read_text().splitlines() if line.strip()]


def _rank_of(pid: int) -> int:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    [value] = [v for v in environ if v.startswith(b"OMPI_COMM_WORLD_RANK=")]
    return int(value.split(b"=", 1)[1])


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_sigterm_to_one_rank_checkpoints_and_a_restart_resumes_by_itself(
    tmp_path: Path,
    run_ranks: Callable[..., Any],
    start_ranks: Callable[..., subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    args = ["--dir", str(out), "--epochs", "3", *DIGITS_ARGS]
    tag = uuid.uuid4().hex
    stdout_path, stderr_path = tmp_path / "ranks-stdout.txt", tmp_path / "ranks-stderr.txt"
    proc = start_ranks(args, env={JOB_TAG_VARIABLE: tag})
    _wait_for(lambda: _epochs_logged(out) == [1], 150, "epoch 1 to end")
    pids = {_rank_of(pid): pid for pid in find_job_python_pids(tag)}
    assert sorted(pids) == [0, 1]
    # The hang watchdog's fallback: SIGUSR1 makes a rank dump its stacks to stderr and go on.
    os.kill(pids[0], signal.SIGUSR1)
    _wait_for(lambda: "most recent call first" in stderr_path.read_text(), 20, "faulthandler's stacks")
    time.sleep(0.3)  # into epoch 2
    epochs_done_at_notice = len(_epochs_logged(out))
    notice = time.monotonic()
    os.kill(pids[1], signal.SIGTERM)  # as the eviction agent of rank 1's node would
    returncode = proc.wait(timeout=60)
    stop_seconds = time.monotonic() - notice
    first_out, first_err = stdout_path.read_text(), stderr_path.read_text()
    report = f"--- stdout\n{first_out}\n--- stderr\n{first_err}"

    assert returncode != 0, report
    stopped = re.findall(r"^Stopped by SIGTERM at (?:step (\d+)/23 of epoch (\d+)|the end of epoch (\d+)): "
                         r"checkpoint (\S+); a restart resumes from it$", first_out, re.M)  # fmt: skip
    assert len(stopped) == 1, report
    step, epoch, end_epoch, checkpoint = stopped[0]
    for rank in (0, 1):
        assert (
            f"rank {rank}: stopped by SIGTERM, checkpoint {checkpoint}; exiting with status 143" in first_err
        )
    assert "Traceback" not in first_err, report
    assert Path(checkpoint).is_file()
    if step:
        assert Path(checkpoint).name == f"interrupted-{int(epoch) - 1:03d}-{int(step):05d}.h5"
        resumed_at = (int(epoch) - 1, int(step))
    else:
        resumed_at = (int(end_epoch), 0)
    assert resumed_at[0] >= epochs_done_at_notice  # nothing finished before the notice is redone
    assert stop_seconds < 30, f"{stop_seconds:.1f}s from SIGTERM to exit: longer than Azure Spot's notice"
    # A later file that does not load (a disk that filled up mid-save) is skipped for the one before.
    (out / "checkpoints" / "checkpoint-009.h5").write_bytes(b"not an HDF5 file")

    monkeypatch.setenv("AZ_BATCHAI_JOB_RESTART_COUNT", "1")
    second = run_ranks(args, timeout=150)  # no --resume: the restart count is enough

    assert second.returncode == 0, second.output()
    assert "Restart 1 (AZ_BATCHAI_JOB_RESTART_COUNT=1)" in second.stdout
    assert "warning: skipping checkpoint checkpoint-009.h5" in second.stderr
    where = f" step {resumed_at[1]}/23 of epoch {resumed_at[0] + 1}" if resumed_at[1] else ""
    assert f"Resumed from epoch {resumed_at[0]}{where} ({checkpoint})" in second.stdout, second.output()
    assert _epochs_logged(out) == [1, 2, 3]
    assert not list((out / "checkpoints").glob("interrupted-*")), "the epoch checkpoint replaces it"
    model = tf.keras.models.load_model(out / "saved_models" / "keras_cifar10_trained_model.h5")
    # No step lost, none repeated: the optimizer ran exactly 3 epochs of steps over the two runs.
    assert int(model.optimizer.iterations.numpy()) == 3 * STEPS_PER_EPOCH
    rank0, rank1 = ((out / f"rank-{r}.weights.sha256").read_text() for r in range(2))
    assert rank0 == rank1
    accuracy = float(re.findall(r"^Test accuracy: ([0-9.]+)$", second.stdout, re.M)[0])
    assert accuracy >= 0.90, second.output()
    print(f"\nSIGTERM -> mpirun exit {returncode} after {stop_seconds:.1f}s; stopped at {resumed_at}; notice after {epochs_done_at_notice} "
          f"epoch(s); steps lost 0; accuracy {accuracy:.3f}")  # fmt: skip
