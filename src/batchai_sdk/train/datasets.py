"""The training scripts' data: CIFAR-10 (archive, extracted folder or Keras' download) and scikit-learn's
digits, as numpy arrays, without TensorFlow or PyTorch (TensorFlow only for the download)."""

from __future__ import annotations

import argparse
import math
import pickle
import tarfile
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from .errors import UserError

DATASETS = ("cifar10", "digits")
NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
CIFAR_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
DIGITS_SPLIT_SEED = 0
DIGITS_TEST_FRACTION = 0.2

Array = NDArray[Any]
Arrays = tuple[tuple[Array, Array], tuple[Array, Array]]


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
    """The images and labels of ``name`` (one of DATASETS): ((x_train, y_train), (x_test, y_test))."""
    if name == "digits":
        return load_digits()
    return load_cifar10(data_dir)


def load_training_data(args: argparse.Namespace, ranks: int) -> Arrays:
    """The data set ``--dataset``/``--data-dir`` name, cut to ``--max-*-samples``; every one of ``ranks``
    ranks needs at least one training image, and the test set must not be empty."""
    (x_train, y_train), (x_test, y_test) = load_dataset(args.dataset, args.data_dir)
    if args.max_train_samples:
        x_train, y_train = x_train[: args.max_train_samples], y_train[: args.max_train_samples]
    if args.max_test_samples:
        x_test, y_test = x_test[: args.max_test_samples], y_test[: args.max_test_samples]
    if len(x_train) < ranks:
        raise UserError(f"{len(x_train)} training images cannot be sharded over {ranks} ranks")
    if len(x_test) == 0:
        raise UserError("the test set is empty")
    return (x_train, y_train), (x_test, y_test)


def steps_per_epoch(train_samples: int, batch_size: int, size: int) -> int:
    """Steps each rank runs so that all ranks together see about one pass over the training set."""
    return max(1, math.ceil(train_samples / (size * batch_size)))
