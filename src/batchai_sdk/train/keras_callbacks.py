"""The Keras script's callbacks: per-epoch checkpoints and metrics lines, and the stop on SIGTERM that every
rank agrees on (TensorFlow is imported inside the factories)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from .checkpoints import checkpoint_name, find_resume_points


def save_atomically(model: Any, path: Path) -> None:
    """``model.save`` (HDF5) to a hidden temporary name beside ``path``, then rename: never half a file."""
    tmp = path.with_name(f".saving-{path.name}")  # ends in .h5: Keras picks the HDF5 format from it
    model.save(str(tmp))
    os.replace(tmp, path)


def make_metrics_logger(path: Path, images_per_epoch: int) -> Any:
    """A callback that appends one JSON line per epoch to ``path`` (``images_per_epoch``: by all ranks)."""
    import tensorflow as tf

    class EpochMetricsLogger(tf.keras.callbacks.Callback):  # type: ignore[misc]
        """Appends one JSON line per epoch; put it after MetricAverageCallback to log averaged metrics."""

        def __init__(self) -> None:
            super().__init__()
            self._epoch_start = 0.0
            self._train_end: float | None = None

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._epoch_start = time.perf_counter()
            self._train_end = None

        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            if self._train_end is None:
                self._train_end = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            now = time.perf_counter()
            logs = logs or {}
            train_seconds = (self._train_end or now) - self._epoch_start

            def metric(key: str) -> float | None:
                value = logs.get(key)
                return None if value is None else float(value)

            record = {
                "epoch": epoch + 1,
                "loss": metric("loss"),
                "accuracy": metric("accuracy"),
                "val_loss": metric("val_loss"),
                "val_accuracy": metric("val_accuracy"),
                "images_per_sec": images_per_epoch / train_seconds if train_seconds > 0 else None,
                "seconds": now - self._epoch_start,
            }
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()

    return EpochMetricsLogger()


def make_checkpointer(folder: Path) -> Any:
    """A callback that writes ``folder/checkpoint-NNN.h5`` after every epoch."""
    import tensorflow as tf

    class EpochCheckpoint(tf.keras.callbacks.Callback):  # type: ignore[misc]
        """checkpoint-NNN.h5 after every epoch (atomic); then the interrupted-* files are out of date."""

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            save_atomically(self.model, folder / checkpoint_name(epoch + 1))
            for _, step, path in find_resume_points(folder):
                if step:
                    path.unlink(missing_ok=True)

    return EpochCheckpoint()


class SigtermFlag:
    """Notes SIGTERM instead of dying from it; the training loop stops at the next batch end."""

    def __init__(self) -> None:
        self.received_at: float | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()


class Interrupted(Exception):
    """Raised out of ``fit`` on every rank at the same step once any rank got SIGTERM."""

    def __init__(self, epochs_done: int, step: int) -> None:
        super().__init__(f"stopped after epoch {epochs_done} + {step} steps")
        self.epochs_done = epochs_done
        self.step = step


def make_sigterm_stopper(hvd_tf: Any, flag: SigtermFlag, steps: int, first_step: int) -> Any:
    """After every batch: one allreduce of "did this rank get SIGTERM"; if any did, raise Interrupted.

    Every rank takes the same decision at the same step. ``first_step`` is the number of steps of the first
    epoch done before this ``fit`` (a resumed interrupted epoch), so steps count from the epoch's start. At
    an epoch's last step the stop waits for the epoch's end (validation, metrics line, epoch checkpoint):
    put this callback last.
    """
    import tensorflow as tf

    class StopOnSigterm(tf.keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._epoch = 0
            self._offset = first_step
            self._stop_at_epoch_end = False

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            mine = 0.0 if flag.received_at is None else 1.0
            anyone = hvd_tf.allreduce(tf.constant(mine), op=hvd_tf.Sum, name="sigterm_flag")
            if float(anyone) > 0:
                step = self._offset + batch + 1
                if step < steps:
                    raise Interrupted(self._epoch, step)
                self._stop_at_epoch_end = True

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._offset = 0
            if self._stop_at_epoch_end:
                raise Interrupted(epoch + 1, 0)

    return StopOnSigterm()
