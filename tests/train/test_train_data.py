"""The training scripts' data side: CIFAR-10 files (archive and folder), digits, and the tf.data input pipeline."""

from __future__ import annotations

import gzip
import io
import pickle
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from batchai_sdk.train import cifar10, datasets, tf_data  # noqa: E402

pytestmark = pytest.mark.train


@pytest.mark.parametrize("form", ["folder", "archive"])
def test_reads_tiny_cifar_in_both_forms(tmp_path: Path, write_cifar: Callable[..., Any], form: str) -> None:
    written = write_cifar(tmp_path, form, per_batch=20, test=10)

    (x_train, y_train), (x_test, y_test) = datasets.load_cifar10(tmp_path)

    assert x_train.shape == (100, 32, 32, 3) and x_train.dtype == np.uint8
    assert x_test.shape == (10, 32, 32, 3) and x_test.dtype == np.uint8
    assert y_train.shape == (100,) and y_train.dtype == np.int64
    assert y_test.shape == (10,)
    # Batches in order data_batch_1..5, labels kept, every pixel where it belongs (CHW rows -> HWC).
    np.testing.assert_array_equal(y_train, written.y_train)
    np.testing.assert_array_equal(y_test, written.y_test)
    np.testing.assert_array_equal(x_train, written.x_train)
    np.testing.assert_array_equal(x_test, written.x_test)


def test_pixel_order_is_red_plane_then_green_then_blue(
    tmp_path: Path, write_cifar: Callable[..., Any]
) -> None:
    written = write_cifar(tmp_path, "folder", per_batch=2, test=2)
    with (written.path / "data_batch_1").open("rb") as f:
        row = pickle.load(f, encoding="bytes")[b"data"][1]

    (x_train, _), _ = datasets.load_cifar10(tmp_path)

    image = x_train[1]
    assert image[0, 0, 0] == row[0]  # red (0, 0)
    assert image[0, 1, 0] == row[1]  # red, next column
    assert image[1, 0, 0] == row[32]  # red, next row
    assert image[0, 0, 1] == row[1024]  # green (0, 0)
    assert image[31, 31, 2] == row[3071]  # blue, last pixel


def test_archive_is_read_without_extracting(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    write_cifar(tmp_path, "archive")
    datasets.load_cifar10(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz"]


def test_data_dir_may_be_the_extracted_folder_itself(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    written = write_cifar(tmp_path, "folder", per_batch=3, test=4)
    (x_train, _), (x_test, _) = datasets.load_cifar10(written.path)
    assert len(x_train) == 15 and len(x_test) == 4


def _error(data_dir: Path) -> str:
    with pytest.raises(datasets.UserError) as info:
        datasets.load_cifar10(data_dir)
    return str(info.value)


def test_corrupt_archive_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"\x1f\x8b\x08garbage" * 100)
    assert "cifar-10-python.tar.gz" in _error(tmp_path)


def test_truncated_archive_is_a_clear_error(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    archive = write_cifar(tmp_path, "archive").path
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    assert "not a readable CIFAR-10 archive" in _error(tmp_path)


def test_archive_without_test_batch_is_a_clear_error(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    message = _error(tmp_path)
    assert "missing" in message and "test_batch" in message


def test_batch_with_wrong_shape_is_a_clear_error(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    folder = write_cifar(tmp_path, "folder").path
    bad = {b"data": np.zeros((4, 1000), np.uint8), b"labels": [0, 1, 2, 3]}
    (folder / "data_batch_3").write_bytes(pickle.dumps(bad))
    message = _error(tmp_path)
    assert "data_batch_3" in message and "(N, 3072)" in message


def test_labels_out_of_range_are_a_clear_error(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    folder = write_cifar(tmp_path, "folder").path
    bad = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 12]}
    (folder / "test_batch").write_bytes(pickle.dumps(bad))
    assert "labels must lie in 0..9" in _error(tmp_path)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_batch_files_cannot_run_code(tmp_path: Path, write_cifar: Callable[..., Any]) -> None:
    folder = write_cifar(tmp_path, "folder").path
    marker = tmp_path / "pwned"
    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": _Payload(marker), b"labels": []}))
    assert "not a CIFAR-10 python batch" in _error(tmp_path)
    assert not marker.exists()


def test_missing_data_names_what_to_put_where(tmp_path: Path) -> None:
    (tmp_path / "cifar-10-python.tar").write_bytes(gzip.compress(b"x"))
    message = _error(tmp_path)
    assert "cifar-10-python.tar.gz" in message and "cifar-10-batches-py" in message


def test_digits_are_32x32x3_images_with_a_fixed_80_20_split() -> None:
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    (x_train, y_train), (x_test, _) = datasets.load_digits()

    assert x_train.shape == (1438, 32, 32, 3) and x_test.shape == (359, 32, 32, 3)
    assert x_train.dtype == np.uint8 and x_train.max() == 255 and x_train.min() == 0
    assert set(np.unique(y_train)) == set(range(10))
    np.testing.assert_array_equal(x_train[..., 0], x_train[..., 2])  # grey in three channels
    # Each 8x8 pixel became a 4x4 block: the top-left of every block gives back the original image.
    originals = {
        img.tobytes() for img in np.round(sklearn_datasets.load_digits().images * 255 / 16).astype(np.uint8)
    }
    assert all(img[::4, ::4, 0].tobytes() in originals for img in x_test)
    _, (x_test_again, _) = datasets.load_digits()
    np.testing.assert_array_equal(x_test, x_test_again)


# ----------------------------------------------------------------------------------------- input pipeline


@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow")


def _labels(dataset: Any, steps: int) -> list[list[int]]:
    iterator = iter(dataset)
    return [next(iterator)[1].numpy().tolist() for _ in range(steps)]


def test_each_rank_gets_a_disjoint_shard_that_changes_every_epoch(tf: Any) -> None:
    n, batch, size = 100, 10, 2
    images = np.zeros((n, 32, 32, 3), np.uint8)
    ids = np.arange(n, dtype=np.int64)  # labels carry the image index here
    steps = datasets.steps_per_epoch(n, batch, size)
    assert steps == 5

    per_rank = [
        _labels(
            tf_data.make_train_dataset(images, ids, batch, rank=r, size=size, seed=3, augment=False),
            2 * steps,
        )
        for r in range(size)
    ]
    epoch1 = [[i for batch in batches[:steps] for i in batch] for batches in per_rank]
    epoch2 = [[i for batch in batches[steps:] for i in batch] for batches in per_rank]
    for epoch in (epoch1, epoch2):
        assert not set(epoch[0]) & set(epoch[1])
        assert sorted(epoch[0] + epoch[1]) == list(range(n))
    assert set(epoch1[0]) != set(epoch2[0])  # reshuffled, not the same shard forever


def test_pipeline_yields_scaled_float_batches_reproducibly(tf: Any) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(64, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=64).astype(np.int64)

    def first_batches(seed: int, augment: bool) -> Any:
        ds = tf_data.make_train_dataset(images, labels, 16, seed=seed, augment=augment)
        return [x.numpy() for x, _ in ds.take(3)]

    plain = first_batches(1, augment=False)
    assert plain[0].shape == (16, 32, 32, 3) and plain[0].dtype == np.float32
    assert min(b.min() for b in plain) >= 0.0 and max(b.max() for b in plain) <= 1.0
    augmented = first_batches(1, augment=True)
    assert not np.allclose(augmented[0], plain[0])
    for a, b in zip(augmented, first_batches(1, augment=True), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(augmented[0], first_batches(2, augment=True)[0])


def test_augmentation_flips_about_half_the_images(tf: Any) -> None:
    images = tf.random.stateless_uniform([64, 32, 32, 3], seed=[0, 1])
    out = tf_data.augment_batch(images, tf.constant([5, 6], tf.int64), shift=0.0).numpy()
    flipped = [np.allclose(o, i.numpy()[:, ::-1]) for o, i in zip(out, images, strict=True)]
    kept = [np.allclose(o, i.numpy()) for o, i in zip(out, images, strict=True)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert 16 <= sum(flipped) <= 48


def test_shifts_fill_borders_with_the_nearest_pixel(tf: Any) -> None:
    # A vertical gradient stays a gradient column-wise after shifting; nothing becomes black.
    column = np.linspace(0.2, 0.8, 32, dtype=np.float32)
    images = np.broadcast_to(column[None, :, None, None], (32, 32, 32, 3)).copy()
    out = tf_data.augment_batch(tf.constant(images), tf.constant([1, 2], tf.int64)).numpy()
    assert out.min() >= 0.2 - 1e-6 and out.max() <= 0.8 + 1e-6
    assert not np.allclose(out, images)  # some images did move
    moved_rows = np.abs(out[:, :, 0, 0] - images[:, :, 0, 0]).max(axis=1)
    assert moved_rows.max() <= 3.3 * (0.6 / 31) + 1e-5  # at most 10 % of 32 pixels


def test_steps_per_epoch_gives_one_pass_over_all_ranks() -> None:
    assert datasets.steps_per_epoch(50000, 32, 1) == 1563
    assert datasets.steps_per_epoch(50000, 32, 4) == 391
    assert datasets.steps_per_epoch(10, 32, 2) == 1


def test_too_few_training_images_for_the_ranks_is_a_clear_error() -> None:
    pytest.importorskip("sklearn")
    args = cifar10.build_parser().parse_args(
        ["--dir", "out", "--dataset", "digits", "--max-train-samples", "1"]
    )
    with pytest.raises(datasets.UserError, match="1 training images cannot be sharded over 2 ranks"):
        datasets.load_training_data(args, ranks=2)
    (x_train, _), (x_test, _) = datasets.load_training_data(
        cifar10.build_parser().parse_args(["-d", "out", "--dataset", "digits", "--max-test-samples", "7"]),
        ranks=2,
    )
    assert len(x_train) == 1438 and len(x_test) == 7
