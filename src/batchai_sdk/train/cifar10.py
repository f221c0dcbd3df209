"""Distributed CIFAR-10 training with Horovod: the Batch AI tutorial's ``cifar_cnn_distributed.py``, updated.

Same model and recipe as the tutorial (Keras' ``cifar10_cnn`` example): Conv32(same)-Conv32-Pool-Dropout(0.25)
-Conv64(same)-Conv64-Pool-Dropout(0.25)-Flatten-Dense512-Dropout(0.5)-Dense10(softmax), RMSprop with learning
rate 1e-4 x ranks and time-based decay 1e-6, batch 32 per rank, random shifts of up to 10 % and horizontal
flips, 100 passes over the training set in total.

Run it as ``python -m batchai_sdk.train.cifar10 --dir OUT`` or, on nodes without batchai_sdk, as
``python cifar10.py --dir OUT``: this file imports only the standard library, numpy, TensorFlow, Horovod and
(for ``--dataset digits``) scikit-learn. Under ``mpirun -np N`` or ``horovodrun -np N`` it trains on N ranks.

Choices and semantics
---------------------
* Sharding: the training set is sharded across ranks (``Dataset.shard(size, rank)`` after a shuffle that
  every rank draws with the same seed, so the shards are disjoint and change every epoch). In one epoch each
  rank sees 1/size of the set, so one epoch is one pass over the set by all ranks together, and the default
  ``--epochs 100`` keeps the tutorial's budget of 100 passes whatever the number of ranks. (The tutorial gave
  every rank the whole set and ran ceil(100 / size) epochs: about the same budget, but epochs, checkpoints and
  metrics meant different things for different rank counts.) Every rank runs
  ceil(train samples / (size x batch size)) steps per epoch, so all ranks do the same number of allreduces.
  Validation is sharded the same way and the per-rank results are averaged by ``MetricAverageCallback``; the
  final ``Test loss``/``Test accuracy`` are computed by rank 0 on the whole test set.
* Learning rate: ``--lr`` (default 1e-4) x size, with Horovod's gradual warm-up from ``--lr`` over
  ``--warmup-epochs``. The tutorial's ``decay=1e-6`` keeps Keras 2's semantics: the legacy
  ``tf.keras.optimizers.legacy.RMSprop(decay=...)`` applies ``lr / (1 + decay * iterations)`` where
  ``iterations`` counts optimizer steps (Keras 2.15's new optimizers no longer accept ``decay``).
* Checkpoints: rank 0 writes ``<dir>/checkpoints/checkpoint-NNN.h5`` (model and optimizer state) after every
  epoch, atomically (a temporary file renamed). ``--resume`` loads the latest one on rank 0, broadcasts its
  epoch to every rank and continues from there; the weights and optimizer state reach the other ranks through
  ``BroadcastGlobalVariablesCallback``. A damaged latest checkpoint is skipped (with a warning) for the one
  before. A first run without ``--resume`` deletes earlier checkpoints in that folder and starts
  ``metrics.jsonl`` afresh.
* Restarts: when ``AZ_BATCHAI_JOB_RESTART_COUNT`` is set and above 0 (the SDK sets it on every attempt after
  the first: a requeued job, an evicted node), the run resumes by itself, as with ``--resume``, from the
  latest checkpoint in ``--dir``, or starts from epoch 0 when there is none yet.
* SIGTERM (an eviction notice, a terminated job): the ranks finish the current batch, agree to stop (a
  one-number allreduce after every batch, so that a signal reaching one node's ranks stops them all at the
  same step), rank 0 saves ``checkpoints/interrupted-NNN-SSSSS.h5`` (NNN epochs done, SSSSS steps of the
  next), every rank prints one ``stopped by SIGTERM ...`` line and exits with status 143. A restart resumes
  at that step: the rest of the interrupted epoch runs on a fresh shuffle, so at most the current batch is
  lost. The next epoch checkpoint removes the ``interrupted-*`` file.
* Stacks: SIGUSR1 makes every rank write the Python stacks of all its threads to stderr (``faulthandler``):
  what the SDK's hang watchdog sends where py-spy is not installed.
* Metrics: rank 0 appends one JSON line per epoch to ``<dir>/metrics.jsonl`` with the keys epoch (1-based),
  loss, accuracy, val_loss, val_accuracy (averaged over ranks), images_per_sec (images trained per second by
  all ranks together, over the training part of the epoch) and seconds (wall time of the whole epoch,
  validation and checkpoint included).
* Errors: unreadable data, a resume without a checkpoint or an output folder that cannot be created are
  detected before training; the ranks then agree (one allgather) so that every rank prints ``error: ...``
  to stderr and exits with status 2 instead of leaving the others waiting in a collective.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import math
import os
import pickle
import random
import re
import signal
import sys
import tarfile
import time
import warnings
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
MODEL_NAME = "keras_cifar10_trained_model.h5"
CIFAR_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
CHECKPOINT_PATTERN = "checkpoint-{epoch:03d}.h5"
INTERRUPTED_PATTERN = "interrupted-{epoch:03d}-{step:05d}.h5"
RESTART_COUNT_VARIABLE = "AZ_BATCHAI_JOB_RESTART_COUNT"
EXIT_SIGTERM = 143  # 128 + SIGTERM, as a shell reports a process ended by it
DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.2

Array = NDArray[Any]
Arrays = tuple[tuple[Array, Array], tuple[Array, Array]]


class UserError(Exception):
    """A problem the user can fix (bad data, no checkpoint...): printed as ``error: ...``, exit status 2."""


# --------------------------------------------------------------------------------------------------- data


class _BatchUnpickler(pickle.Unpickler):
    """Unpickler for CIFAR batches: only the numpy globals an ndarray needs, never arbitrary code."""

    _ALLOWED = frozenset(
        {
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
            ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 store bytes
        }
    )

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR batch")


def decode_cifar_batch(fileobj: IO[bytes], source: str) -> tuple[Array, Array]:
    """Read one pickled CIFAR-10 batch: images (N, 32, 32, 3) uint8 in HWC order and labels (N,) int64."""
    try:
        batch = _BatchUnpickler(fileobj, encoding="bytes").load()
    except Exception as exc:  # pickle raises many kinds on garbage input
        raise UserError(f"{source}: not a CIFAR-10 python batch ({type(exc).__name__}: {exc})") from exc
    if not isinstance(batch, dict):
        raise UserError(f"{source}: expected a pickled dict, found {type(batch).__name__}")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise UserError(f"{source}: the batch has no b'data' or no b'labels' entry")
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 32 * 32 * 3:
        raise UserError(
            f"{source}: b'data' must be uint8 of shape (N, 3072), found {data.dtype} {tuple(data.shape)}"
        )
    try:
        label_array = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{source}: b'labels' is not a list of integers ({exc})") from exc
    if label_array.shape[0] != data.shape[0]:
        raise UserError(f"{source}: {data.shape[0]} images but {label_array.shape[0]} labels")
    if label_array.size and (label_array.min() < 0 or label_array.max() >= NUM_CLASSES):
        raise UserError(f"{source}: labels must lie in 0..{NUM_CLASSES - 1}")
    # Each row is 1024 red, then 1024 green, then 1024 blue values, row-major: CHW -> HWC.
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), label_array


def _concat(parts: list[tuple[Array, Array]]) -> tuple[Array, Array]:
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def load_cifar10_folder(folder: Path) -> Arrays:
    """Load the extracted ``cifar-10-batches-py/`` folder."""
    parts: dict[str, tuple[Array, Array]] = {}
    for name in (*TRAIN_BATCHES, TEST_BATCH):
        path = folder / name
        try:
            with path.open("rb") as f:
                parts[name] = decode_cifar_batch(f, str(path))
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return _concat([parts[n] for n in TRAIN_BATCHES]), parts[TEST_BATCH]


def load_cifar10_archive(archive: Path) -> Arrays:
    """Load ``cifar-10-python.tar.gz`` without extracting it."""
    parts: dict[str, tuple[Array, Array]] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = {
                Path(m.name).name: m
                for m in tar.getmembers()
                if m.isfile() and Path(m.name).name in (*TRAIN_BATCHES, TEST_BATCH)
            }
            missing = [n for n in (*TRAIN_BATCHES, TEST_BATCH) if n not in members]
            if missing:
                raise UserError(f"{archive}: missing {', '.join(missing)} (expected {CIFAR_FOLDER}/<batch>)")
            for name in (*TRAIN_BATCHES, TEST_BATCH):
                fileobj = tar.extractfile(members[name])
                if fileobj is None:
                    raise UserError(f"{archive}: cannot read member {members[name].name}")
                with fileobj:
                    parts[name] = decode_cifar_batch(fileobj, f"{archive}:{members[name].name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{archive}: not a readable CIFAR-10 archive ({type(exc).__name__}: {exc})") from exc
    return _concat([parts[n] for n in TRAIN_BATCHES]), parts[TEST_BATCH]


def load_cifar10(data_dir: Path | None) -> Arrays:
    """CIFAR-10 from ``data_dir`` (archive or extracted folder), or downloaded by Keras if it is None."""
    if data_dir is None:
        return _download_cifar10()
    if not data_dir.is_dir():
        raise UserError(f"--data-dir {data_dir} is not a directory")
    if (data_dir / CIFAR_FOLDER).is_dir():
        return load_cifar10_folder(data_dir / CIFAR_FOLDER)
    if (data_dir / CIFAR_ARCHIVE).is_file():
        return load_cifar10_archive(data_dir / CIFAR_ARCHIVE)
    if (data_dir / TRAIN_BATCHES[0]).is_file():
        return load_cifar10_folder(data_dir)
    raise UserError(
        f"--data-dir {data_dir} holds neither {CIFAR_ARCHIVE} nor {CIFAR_FOLDER}/ "
        f"(download {CIFAR_URL} and put it there)"
    )


def _download_cifar10() -> Arrays:
    import tensorflow as tf

    try:
        (x_train, y_train), (x_test, y_test) = tf.keras.datasets.cifar10.load_data()
    except Exception as exc:  # URL errors, proxies, truncated downloads all end up here
        raise UserError(
            f"could not download CIFAR-10 ({type(exc).__name__}: {exc}). Without network access, download "
            f"{CIFAR_URL} elsewhere, put {CIFAR_ARCHIVE} (or the extracted {CIFAR_FOLDER}/) in a directory "
            "and pass --data-dir DIRECTORY"
        ) from exc
    return (x_train, y_train.reshape(-1).astype(np.int64)), (x_test, y_test.reshape(-1).astype(np.int64))


def load_digits() -> Arrays:
    """scikit-learn's 8x8 digits as 32x32x3 uint8 images (values 0..255), split 80/20 with a fixed seed."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError as exc:
        raise UserError("--dataset digits needs scikit-learn (pip install scikit-learn)") from exc
    digits = sk_load_digits()
    # 8x8 -> 32x32 by repeating every pixel 4x4 times; 0..16 -> 0..255; grey -> 3 identical channels.
    big = np.kron(digits.images, np.ones((1, 4, 4)))
    grey = np.round(big * (255.0 / 16.0)).astype(np.uint8)
    images = np.repeat(grey[..., None], 3, axis=-1)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(images))
    n_test = int(len(images) * DIGITS_TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return (images[train], labels[train]), (images[test], labels[test])


def load_dataset(name: str, data_dir: Path | None) -> Arrays:
    if name == "digits":
        return load_digits()
    return load_cifar10(data_dir)


# ------------------------------------------------------------------------------------------ input pipeline


def augment_batch(images: Any, seed: Any, shift: float = 0.1) -> Any:
    """Random horizontal flip and random shift of up to ``shift`` x size, per image, for a float batch.

    Like the tutorial's ImageDataGenerator(width_shift_range=0.1, height_shift_range=0.1,
    horizontal_flip=True, fill_mode='nearest'): sub-pixel shifts with bilinear interpolation, borders filled
    with the nearest pixel. ``seed`` is a stateless seed (shape [2]), so the result does not depend on how
    tf.data schedules parallel calls.
    """
    import tensorflow as tf

    seeds = tf.random.experimental.stateless_split(seed, num=3)
    batch = tf.shape(images)[0]
    height = tf.cast(tf.shape(images)[1], tf.float32)
    width = tf.cast(tf.shape(images)[2], tf.float32)
    flip = tf.random.stateless_uniform([batch], seed=seeds[0]) < 0.5
    images = tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images)
    dx = tf.random.stateless_uniform([batch], seed=seeds[1], minval=-shift, maxval=shift) * width
    dy = tf.random.stateless_uniform([batch], seed=seeds[2], minval=-shift, maxval=shift) * height
    ones, zeros = tf.ones_like(dx), tf.zeros_like(dx)
    # Projective transform rows [a0 a1 a2 b0 b1 b2 c0 c1]: output (x, y) samples input (x + dx, y + dy).
    transforms = tf.stack([ones, zeros, dx, zeros, ones, dy, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=transforms,
        output_shape=tf.shape(images)[1:3],
        interpolation="BILINEAR",
        fill_mode="NEAREST",
        fill_value=0.0,
    )


def make_train_dataset(
    images: Array,
    labels: Array,
    batch_size: int,
    *,
    rank: int = 0,
    size: int = 1,
    seed: int = 0,
    augment: bool = True,
    start_step: int = 0,
) -> Any:
    """Endless tf.data pipeline of (float images in [0, 1], int labels) batches for one rank.

    Every rank shuffles the indices with the same seed, then keeps every ``size``-th one starting at
    ``rank``: disjoint shards that cover the set, reshuffled each pass. Augmentation runs in the graph on
    whole batches, in parallel, with per-step stateless seeds (``start_step`` keeps them fresh on resume).
    """
    import tensorflow as tf

    n = len(images)
    all_images = tf.constant(images)
    all_labels = tf.constant(labels)
    # Distinct augmentation streams per rank; (seed, rank) -> one int64.
    stream = (seed % (1 << 40)) * 4096 + rank

    indices = tf.data.Dataset.range(n).shuffle(n, seed=seed, reshuffle_each_iteration=True)
    if size > 1:
        indices = indices.shard(size, rank)
    batches = indices.repeat().batch(batch_size, drop_remainder=True).enumerate(start=start_step)

    def prepare(step: Any, idx: Any) -> tuple[Any, Any]:
        x = tf.cast(tf.gather(all_images, idx), tf.float32) / 255.0
        y = tf.gather(all_labels, idx)
        if augment:
            x = augment_batch(x, tf.stack([tf.constant(stream, tf.int64), step]))
        return x, y

    return batches.map(prepare, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(
        tf.data.AUTOTUNE
    )


def make_eval_dataset(images: Array, labels: Array, batch_size: int, *, rank: int = 0, size: int = 1) -> Any:
    """Finite pipeline over this rank's shard of an evaluation set (the whole set when size == 1)."""
    import tensorflow as tf

    all_images = tf.constant(images)
    all_labels = tf.constant(labels)
    indices = tf.data.Dataset.range(len(images))
    if size > 1:
        indices = indices.shard(size, rank)

    def prepare(idx: Any) -> tuple[Any, Any]:
        return tf.cast(tf.gather(all_images, idx), tf.float32) / 255.0, tf.gather(all_labels, idx)

    batches = indices.batch(batch_size).map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
    return batches.prefetch(tf.data.AUTOTUNE)


def steps_per_epoch(train_samples: int, batch_size: int, size: int) -> int:
    """Steps each rank runs so that all ranks together see about one pass over the training set."""
    return max(1, math.ceil(train_samples / (size * batch_size)))


# ------------------------------------------------------------------------------------------------- model


def build_model(input_shape: tuple[int, int, int] = IMAGE_SHAPE, num_classes: int = NUM_CLASSES) -> Any:
    """The tutorial's CNN (uncompiled). Layers are named so that every rank's variables line up."""
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input(shape=input_shape, name="image"),
            layers.Conv2D(32, (3, 3), padding="same", activation="relu", name="conv1"),
            layers.Conv2D(32, (3, 3), activation="relu", name="conv2"),
            layers.MaxPooling2D(pool_size=(2, 2), name="pool1"),
            layers.Dropout(0.25, name="drop1"),
            layers.Conv2D(64, (3, 3), padding="same", activation="relu", name="conv3"),
            layers.Conv2D(64, (3, 3), activation="relu", name="conv4"),
            layers.MaxPooling2D(pool_size=(2, 2), name="pool2"),
            layers.Dropout(0.25, name="drop2"),
            layers.Flatten(name="flatten"),
            layers.Dense(512, activation="relu", name="dense"),
            layers.Dropout(0.5, name="drop3"),
            layers.Dense(num_classes, name="logits"),
            # float32 output keeps the softmax and the loss stable under mixed precision.
            layers.Activation("softmax", dtype="float32", name="softmax"),
        ],
        name="cifar10_cnn",
    )


def make_optimizer(learning_rate: float, decay: float) -> Any:
    """RMSprop with Keras 2's time-based decay: lr / (1 + decay * iterations)."""
    import tensorflow as tf

    return tf.keras.optimizers.legacy.RMSprop(learning_rate=learning_rate, decay=decay)


def weights_sha256(model: Any) -> str:
    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


# ------------------------------------------------------------------------------------- checkpoints, logs

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)\.h5$")
_INTERRUPTED_RE = re.compile(r"^interrupted-(\d+)-(\d+)\.h5$")


def find_checkpoints(folder: Path, pattern: re.Pattern[str] | None = None) -> list[tuple[int, Path]]:
    """(epoch, path) of the ``checkpoint-NNN.h5`` files in ``folder`` (or those ``pattern`` matches, its
    first group the epoch), oldest first."""
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = (pattern or _CHECKPOINT_RE).match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def find_resume_points(folder: Path) -> list[tuple[int, int, Path]]:
    """(epochs done, steps of the next epoch done, path) of every checkpoint in ``folder``, oldest first.

    ``checkpoint-NNN.h5`` is (NNN, 0); ``interrupted-NNN-SSSSS.h5``, saved on SIGTERM, is (NNN, SSSSS).
    """
    found = [(epoch, 0, path) for epoch, path in find_checkpoints(folder)]
    if folder.is_dir():
        for path in folder.iterdir():
            match = _INTERRUPTED_RE.match(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), int(match.group(2)), path))
    return sorted(found)


def restart_count(environ: Any = None) -> int:
    """``AZ_BATCHAI_JOB_RESTART_COUNT`` as an integer (0 when unset or not a number >= 0)."""
    text = (os.environ if environ is None else environ).get(RESTART_COUNT_VARIABLE, "")
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def save_atomically(model: Any, path: Path) -> None:
    """``model.save`` (HDF5) to a hidden temporary name beside ``path``, then rename: never half a file."""
    tmp = path.with_name(f".saving-{path.name}")  # ends in .h5: Keras picks the HDF5 format from it
    model.save(str(tmp))
    os.replace(tmp, path)


def _trim_metrics(path: Path, last_epoch: int) -> None:
    """Keep the metrics lines of epochs 1..last_epoch (a resumed run rewrites the later ones)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        epoch = record.get("epoch") if isinstance(record, dict) else None
        if isinstance(epoch, int) and epoch <= last_epoch:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _make_metrics_logger(path: Path, images_per_epoch: int) -> Any:
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


def _make_checkpointer(folder: Path) -> Any:
    import tensorflow as tf

    class EpochCheckpoint(tf.keras.callbacks.Callback):  # type: ignore[misc]
        """checkpoint-NNN.h5 after every epoch (atomic); then the interrupted-* files are out of date."""

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            save_atomically(self.model, folder / CHECKPOINT_PATTERN.format(epoch=epoch + 1))
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


class _Interrupted(Exception):
    """Raised out of ``fit`` on every rank at the same step once any rank got SIGTERM."""

    def __init__(self, epochs_done: int, step: int) -> None:
        super().__init__(f"stopped after epoch {epochs_done} + {step} steps")
        self.epochs_done = epochs_done
        self.step = step


def _make_sigterm_stopper(hvd_tf: Any, flag: SigtermFlag, steps: int, first_step: int) -> Any:
    """After every batch: one allreduce of "did this rank get SIGTERM"; if any did, raise _Interrupted.

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
                    raise _Interrupted(self._epoch, step)
                self._stop_at_epoch_end = True

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._offset = 0
            if self._stop_at_epoch_end:
                raise _Interrupted(epoch + 1, 0)

    return StopOnSigterm()


# ---------------------------------------------------------------------------------------------- command


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _seed(text: str) -> int:
    value = int(text)
    if not 0 <= value < 1 << 32:
        raise argparse.ArgumentTypeError(f"must lie in 0..2**32-1 (numpy's range), got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


_EPILOG = """\
distribution:
  The training set is sharded across the N ranks: in one epoch each rank trains on its own 1/N of the
  set, so an epoch is one pass over the set by all ranks together and the default --epochs 100 keeps the
  tutorial's budget of 100 passes for any N (the tutorial instead gave every rank the whole set and ran
  ceil(100/N) epochs). The learning rate is --lr x N, warmed up from --lr over --warmup-epochs, with RMSprop's
  time-based decay lr / (1 + decay x step).

outputs in --dir:
  saved_models/keras_cifar10_trained_model.h5   final model (rank 0)
  checkpoints/checkpoint-NNN.h5                 model + optimizer after each epoch (rank 0), for --resume
  checkpoints/interrupted-NNN-SSSSS.h5          saved on SIGTERM at step SSSSS of epoch NNN+1 (exit 143)
  metrics.jsonl                                 one JSON line per epoch: epoch, loss, accuracy, val_loss,
                                                val_accuracy, images_per_sec (all ranks), seconds

restarts:
  With AZ_BATCHAI_JOB_RESTART_COUNT above 0 (set by the SDK on a requeued job's later attempts) the run
  resumes by itself from the newest checkpoint in --dir, as with --resume, or starts afresh if there is none.
  SIGTERM stops every rank at the end of the current batch, with a checkpoint. SIGUSR1 prints every
  thread's stack to stderr (faulthandler).

examples:
  mpirun -np 4 python cifar10.py --dir /mnt/share/cifar --data-dir /mnt/share/data
  horovodrun -np 2 python -m batchai_sdk.train.cifar10 --dir out --dataset digits --epochs 5
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "cifar10.py",
        description="Train the Batch AI tutorial's CIFAR-10 CNN with Horovod (run under mpirun/horovodrun).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-d",
        "--dir",
        type=Path,
        required=True,
        help="output directory, usually on the shared file system: saved_models/, checkpoints/, "
        "metrics.jsonl",
    )
    parser.add_argument(
        "--epochs",
        type=_positive_int,
        default=100,
        help="total number of epochs; one epoch is one pass over the training set by all ranks together "
        "(default: %(default)s, the tutorial's budget)",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=32,
        help="batch size per rank; the global batch is this x ranks (default: %(default)s)",
    )
    parser.add_argument(
        "--lr",
        type=_positive_float,
        default=1e-4,
        help="base learning rate per rank; the optimizer uses lr x ranks (default: %(default)s)",
    )
    parser.add_argument(
        "--decay",
        type=float,
        default=1e-6,
        help="RMSprop time-based decay, Keras 2 semantics lr / (1 + decay x step) (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset",
        choices=("cifar10", "digits"),
        default="cifar10",
        help="cifar10 (default), or scikit-learn's 8x8 digits upscaled to 32x32x3 and split 80/20 with a "
        "fixed seed: a small, offline stand-in for quick runs",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"directory holding {CIFAR_ARCHIVE} (read without extracting) or the extracted {CIFAR_FOLDER}/; "
        "without it the set is downloaded by tf.keras.datasets.cifar10 (needs network access)",
    )
    parser.add_argument(
        "--no-augmentation",
        action="store_true",
        help="train without the random shifts (up to 10%%) and horizontal flips",
    )
    parser.add_argument(
        "--mixed-precision",
        action="store_true",
        help="compute in float16 with float32 variables (mixed_float16); needs a GPU, ignored with a warning "
        "on CPU",
    )
    parser.add_argument(
        "--warmup-epochs",
        type=_non_negative_int,
        default=5,
        help="epochs of Horovod's gradual learning-rate warm-up from lr to lr x ranks; 0 disables it "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the latest <dir>/checkpoints/checkpoint-NNN.h5 (weights, optimizer state, "
        "epoch); --epochs stays the total, so --resume --epochs 100 finishes an interrupted 100-epoch run",
    )
    parser.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help="seed for Python, numpy, TensorFlow, shuffling and augmentation, for reproducible runs "
        "(default: a random seed chosen by rank 0)",
    )
    parser.add_argument(
        "--max-train-samples",
        type=_positive_int,
        default=None,
        help="use only the first N training images (quick runs)",
    )
    parser.add_argument(
        "--max-test-samples",
        type=_positive_int,
        default=None,
        help="use only the first N test images (quick runs)",
    )
    parser.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=2,
        help="Keras progress on rank 0: 0 silent, 1 progress bar, 2 one line per epoch, best for log files "
        "(default: %(default)s); other ranks are always silent",
    )
    parser.add_argument(
        "--save-rank-weights",
        action="store_true",
        help="at the end, every rank writes the SHA-256 of its weights to <dir>/rank-<r>.weights.sha256 "
        "(checks that all ranks hold the same model)",
    )
    return parser


def _pin_gpu(tf: Any, local_rank: int) -> list[Any]:
    """One GPU per process (the one matching the local rank), with on-demand memory growth."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
    return list(gpus)


def _to_stderr(line: str) -> None:
    # One write per line: print() writes the text and the newline separately, and mpirun then interleaves
    # the ranks' messages on one line.
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class _ReportedError(UserError):
    """A UserError whose message this rank has already printed."""


def _agree(hvd_tf: Any, error: str | None, step: str) -> None:
    """Collective: if any rank reported an error, every rank prints one and raises _ReportedError.

    The ranks print before a final barrier so that no rank exits (and makes mpirun kill the others) before
    every rank has written its message.
    """
    errors = hvd_tf.allgather_object(error, name=f"startup_{step}")
    failures = [(rank, message) for rank, message in enumerate(errors) if message]
    if not failures:
        return
    own = errors[hvd_tf.rank()]
    rank, first = failures[0]
    message = own or f"rank {rank} failed: {first}"
    _to_stderr(f"error: {message}")
    hvd_tf.allgather_object(None, name=f"reported_{step}")
    raise _ReportedError(message)


def _prepare_outputs(out_dir: Path, resume: bool, restart: int) -> list[tuple[int, int, Path]]:
    """Rank 0: create the output folders; the checkpoints to resume from (newest first), or clear them.

    ``--resume`` needs a checkpoint; a restart (``restart`` > 0) takes one if there is any and otherwise
    starts from epoch 0; a first run clears earlier checkpoints and metrics.
    """
    ckpt_dir = out_dir / "checkpoints"
    try:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {ckpt_dir}: {exc.strerror or exc}") from exc
    points = find_resume_points(ckpt_dir)
    if resume or restart:
        if not points and resume:
            raise UserError(f"--resume: no checkpoint-NNN.h5 in {ckpt_dir}; run without --resume to start")
        if points:
            return points[::-1]
    for *_, path in points:
        path.unlink()
    (out_dir / "metrics.jsonl").write_text("", encoding="utf-8")
    return []


def _load_latest(hvd: Any, candidates: list[tuple[int, int, Path]]) -> tuple[int, int, Path, Any]:
    """Rank 0: the newest checkpoint that loads; damaged ones are skipped with a warning."""
    failure: UserError | None = None
    for epoch, step, path in candidates:
        try:
            return epoch, step, path, _load_checkpoint(hvd, path)
        except UserError as exc:
            _to_stderr(f"warning: skipping checkpoint {path.name}: {exc}")
            failure = failure or exc
    assert failure is not None
    raise failure


def _load_checkpoint(hvd: Any, path: Path) -> tuple[list[Array], list[Array]]:
    """Rank 0: model weights and optimizer state of a checkpoint, checked against this script's model."""
    try:
        restored = hvd.load_model(str(path), legacy_opts=True)
    except Exception as exc:  # h5py and Keras raise many kinds for a damaged file
        raise UserError(f"cannot load checkpoint {path} ({type(exc).__name__}: {exc})") from exc
    weights = restored.get_weights()
    expected = [tuple(w.shape) for w in build_model().get_weights()]
    if [tuple(w.shape) for w in weights] != expected or restored.optimizer is None:
        raise UserError(f"checkpoint {path} does not hold this script's model and optimizer")
    slots = restored.optimizer.get_weights()
    if len(slots) != 1 + len(restored.trainable_weights):  # iterations + one RMS slot per variable
        raise UserError(f"checkpoint {path} has no RMSprop state ({len(slots)} optimizer weights)")
    return weights, slots


def _describe(exc: Exception) -> str:
    return str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}"


def _training_data(args: argparse.Namespace, size: int) -> Arrays:
    """The data set, cut to --max-*-samples; every rank needs at least one training image."""
    (x_train, y_train), (x_test, y_test) = load_dataset(args.dataset, args.data_dir)
    if args.max_train_samples:
        x_train, y_train = x_train[: args.max_train_samples], y_train[: args.max_train_samples]
    if args.max_test_samples:
        x_test, y_test = x_test[: args.max_test_samples], y_test[: args.max_test_samples]
    if len(x_train) < size:
        raise UserError(f"{len(x_train)} training images cannot be sharded over {size} ranks")
    if len(x_test) == 0:
        raise UserError("the test set is empty")
    return (x_train, y_train), (x_test, y_test)


def train(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        import horovod.tensorflow as hvd_tf
        import horovod.tensorflow.keras as hvd
        import tensorflow as tf
    except ImportError as exc:
        raise UserError(f"TensorFlow and Horovod (with TensorFlow support) are required: {exc}") from exc

    # The h5 format is what the tutorial (and the SDK) expects; Keras 2.15 warns about it at every save.
    warnings.filterwarnings(
        "ignore", message="You are saving your model as an HDF5 file", category=UserWarning
    )
    sigterm = SigtermFlag()
    sigterm.install()  # from here on SIGTERM stops training at the next batch end, with a checkpoint
    hvd.init()
    rank, size, local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
    is_root = rank == 0
    gpus = _pin_gpu(tf, local_rank)
    out_dir: Path = args.dir

    # Everything that can fail because of the user's input happens here, before any collective op.
    data: Arrays | None = None
    resume_epoch, resume_step, resume_path = 0, 0, None
    restart = restart_count()
    restored: tuple[list[Array], list[Array]] | None = None
    download = args.dataset == "cifar10" and args.data_dir is None
    error: str | None = None
    try:
        if not download or local_rank == 0:  # one download per node; the others read its cache later
            data = _training_data(args, size)
        if is_root:
            candidates = _prepare_outputs(out_dir, args.resume, restart)
            if candidates:
                resume_epoch, resume_step, resume_path, restored = _load_latest(hvd, candidates)
                _trim_metrics(out_dir / "metrics.jsonl", resume_epoch)
    except Exception as exc:  # anything, not only UserError, must reach the agreement or the others hang
        error = _describe(exc)
    _agree(hvd_tf, error, "setup")
    if download:
        error = None
        try:
            if data is None:
                data = _training_data(args, size)
        except Exception as exc:
            error = _describe(exc)
        _agree(hvd_tf, error, "download")
    assert data is not None
    (x_train, y_train), (x_test, y_test) = data

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    seed = int(hvd.broadcast(seed, root_rank=0, name="seed"))
    resume_epoch = int(hvd.broadcast(resume_epoch, root_rank=0, name="resume_epoch"))
    resume_step = int(hvd.broadcast(resume_step, root_rank=0, name="resume_step"))
    tf.keras.utils.set_random_seed(seed)  # python, numpy and TensorFlow; the same on every rank

    mixed_precision = args.mixed_precision
    if mixed_precision and not gpus:
        if is_root:
            _to_stderr("warning: --mixed-precision needs a GPU; training in float32 on CPU")
        mixed_precision = False
    if mixed_precision:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")

    steps = steps_per_epoch(len(x_train), args.batch_size, size)
    resume_step = min(resume_step, steps - 1)  # a checkpoint from a run with another number of ranks
    scaled_lr = args.lr * size
    if is_root:
        print("x_train shape:", x_train.shape)
        print(len(x_train), "train samples")
        print(len(x_test), "test samples")
        print(
            f"{size} rank(s), {steps} steps of {args.batch_size} per rank and epoch, lr {scaled_lr:g}, "
            f"seed {seed}, {'GPU' if gpus else 'CPU'}, augmentation {'off' if args.no_augmentation else 'on'}"
        )
        if restart:
            print(f"Restart {restart} ({RESTART_COUNT_VARIABLE}={restart})")
        if resume_path is not None:
            at = f" step {resume_step}/{steps} of epoch {resume_epoch + 1}" if resume_step else ""
            print(f"Resumed from epoch {resume_epoch}{at} ({resume_path})")
        elif restart:
            print(f"No checkpoint in {out_dir / 'checkpoints'} yet: starting from epoch 0")

    model = build_model()
    model.compile(
        loss="sparse_categorical_crossentropy",
        optimizer=hvd.DistributedOptimizer(make_optimizer(scaled_lr, args.decay)),
        metrics=["accuracy"],
    )
    # Create the optimizer's slots now, identically on every rank: Horovod matches broadcasts by variable
    # name, and slots created lazily inside the first step get differently scoped names than restored ones.
    model.optimizer._create_all_weights(model.trainable_variables)
    if restored is not None:
        model.set_weights(restored[0])
        model.optimizer.set_weights(restored[1])
    # Start every rank from rank 0's state (random init or checkpoint) before the first step, so that the
    # first averaged gradient is computed on identical models. The callback below repeats it after step 1.
    hvd_tf.broadcast_variables(model.variables, root_rank=0)
    hvd_tf.broadcast_variables(model.optimizer.variables(), root_rank=0)

    shard_validation = len(x_test) >= size
    val_ds = make_eval_dataset(
        x_test,
        y_test,
        max(args.batch_size, 128),
        rank=rank if shard_validation else 0,
        size=size if shard_validation else 1,
    )

    def fit(first_epoch: int, end_epoch: int, done: int) -> None:
        """Epochs first_epoch+1..end_epoch; ``done``: steps of the first one run before an interruption."""
        train_ds = make_train_dataset(
            x_train,
            y_train,
            args.batch_size,
            rank=rank,
            size=size,
            seed=seed + first_epoch,
            augment=not args.no_augmentation,
            start_step=first_epoch * steps,
        )
        if done:
            train_ds = train_ds.skip(done)  # the interrupted epoch's remaining steps, on a fresh shuffle
        callbacks: list[Any] = [
            # Rank 0's weights and optimizer state (random init or checkpoint) go to every rank after step 1.
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            # Average metrics over ranks before the callbacks below read them.
            hvd.callbacks.MetricAverageCallback(),
        ]
        if args.warmup_epochs > 0:
            callbacks.append(
                hvd.callbacks.LearningRateWarmupCallback(
                    initial_lr=scaled_lr,
                    warmup_epochs=args.warmup_epochs,
                    steps_per_epoch=steps,
                    verbose=1 if is_root and args.verbose else 0,
                )
            )
        if is_root:
            callbacks.append(_make_checkpointer(out_dir / "checkpoints"))
            images = (steps - done) * args.batch_size * size
            callbacks.append(_make_metrics_logger(out_dir / "metrics.jsonl", images))
        callbacks.append(_make_sigterm_stopper(hvd_tf, sigterm, steps, done))  # last: see its docstring
        model.fit(
            train_ds,
            steps_per_epoch=steps - done,
            epochs=end_epoch,
            initial_epoch=first_epoch,
            validation_data=val_ds,
            callbacks=callbacks,
            verbose=args.verbose if is_root else 0,
        )

    try:
        if resume_step and resume_epoch < args.epochs:
            fit(resume_epoch, resume_epoch + 1, resume_step)
            resume_epoch, resume_step = resume_epoch + 1, 0
        if resume_epoch < args.epochs:
            fit(resume_epoch, args.epochs, 0)
    except _Interrupted as stop:
        return _stop_on_sigterm(hvd_tf, model, stop, rank, steps, out_dir / "checkpoints")

    if args.save_rank_weights:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"rank-{rank}.weights.sha256").write_text(weights_sha256(model) + "\n", encoding="utf-8")
    if is_root:
        save_dir = out_dir / "saved_models"
        save_dir.mkdir(parents=True, exist_ok=True)
        model_path = save_dir / MODEL_NAME
        model.save(str(model_path))
        print(f"Saved trained model at {model_path}")
        scores = model.evaluate(make_eval_dataset(x_test, y_test, max(args.batch_size, 128)), verbose=0)
        print("Test loss:", scores[0])
        print("Test accuracy:", scores[1])
    return 0


def _stop_on_sigterm(hvd_tf: Any, model: Any, stop: _Interrupted, rank: int, steps: int, folder: Path) -> int:
    """Every rank, after _Interrupted: rank 0 saves where training stopped; all wait for it, then exit 143."""
    saved: str | None = None
    if rank == 0:
        if stop.step:
            path = folder / INTERRUPTED_PATTERN.format(epoch=stop.epochs_done, step=stop.step)
            save_atomically(model, path)
        else:
            path = folder / CHECKPOINT_PATTERN.format(epoch=stop.epochs_done)  # written at the epoch's end
        saved = str(path)
        epoch = stop.epochs_done
        where = f"step {stop.step}/{steps} of epoch {epoch + 1}" if stop.step else f"the end of epoch {epoch}"
        print(f"Stopped by SIGTERM at {where}: checkpoint {saved}; a restart resumes from it", flush=True)
    saved = hvd_tf.broadcast_object(saved, root_rank=0, name="sigterm_saved")  # every rank waits for the save
    _to_stderr(f"rank {rank}: stopped by SIGTERM, checkpoint {saved}; exiting with status {EXIT_SIGTERM}")
    return EXIT_SIGTERM


def main(argv: list[str] | None = None) -> int:
    if hasattr(faulthandler, "register"):  # not on Windows
        # `kill -USR1 <pid>` (the SDK's hang watchdog without py-spy): every thread's stack to stderr.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = build_parser().parse_args(argv)  # exits 2 on usage errors, before Horovod starts
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # progress lines reach the job's log files as they come
    try:
        return train(args)
    except UserError as exc:
        if not isinstance(exc, _ReportedError):
            _to_stderr(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
