"""Helpers for the training-script tests: tiny CIFAR-10 files and multi-rank runs under mpirun."""

from __future__ import annotations

import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# Two ranks on a small machine, as root, over loopback TCP only.
MPIRUN_FLAGS = (
    "--oversubscribe",
    "--bind-to",
    "none",
    "-mca",
    "btl",
    "self,tcp",
    "-mca",
    "btl_tcp_if_include",
    "lo",
)
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# Runs a script file the way the cluster nodes do, with batchai_sdk made unimportable.
WITHOUT_SDK = (
    "import runpy, sys; sys.modules['batchai_sdk'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)

TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]


def train_env() -> dict[str, str]:
    env = {**os.environ, **MPI_ROOT_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


def mpirun_command(ranks: int, argv: Sequence[str]) -> list[str]:
    return ["mpirun", "-np", str(ranks), *MPIRUN_FLAGS, *argv]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def output(self) -> str:
        return f"exit {self.returncode} after {self.seconds:.0f}s\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def run_command(command: Sequence[str], timeout: float, cwd: Path | None = None) -> Run:
    """Run ``command``; on timeout kill its whole process group (mpirun and its ranks) and fail the test."""
    start = time.monotonic()
    proc = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=train_env(),
        cwd=cwd, start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"{' '.join(command)} still running after {timeout}s (hang?)\n{stdout}\n{stderr}")
    return Run(proc.returncode, stdout, stderr, time.monotonic() - start)


@pytest.fixture(scope="session")
def run_ranks() -> Callable[..., Run]:
    """``run_ranks(args, ranks=2, timeout=150, script=None)``: the training module under mpirun.

    With ``script`` (a copy of ``module_path("cifar10")``), runs that file as ``python cifar10.py`` without batchai_sdk,
    as on a cluster node; otherwise runs ``python -m batchai_sdk.train.cifar10``.
    """
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")

    def run(args: Sequence[str], ranks: int = 2, timeout: float = 150, script: Path | None = None) -> Run:
        if script is None:
            python = [sys.executable, "-m", "batchai_sdk.train.cifar10"]
        else:
            python = [sys.executable, "-c", WITHOUT_SDK, str(script)]
        return run_command(mpirun_command(ranks, [*python, *args]), timeout)

    return run


# ------------------------------------------------------------------------------------- tiny CIFAR-10 files


def known_images(count: int, offset: int) -> Any:
    """Images whose every pixel value is a known function of (image, row, column, channel)."""
    import numpy as np

    i, h, w, c = np.meshgrid(np.arange(count), np.arange(32), np.arange(32), np.arange(3), indexing="ij")
    return ((i + offset) * 13 + h * 7 + w * 3 + c * 101).astype(np.uint8)


@dataclass
class TinyCifar:
    """The arrays a tiny CIFAR-10 set was written from (images in HWC order) and where it was written."""

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    path: Path


def _batch_bytes(images: Any, labels: Any) -> bytes:
    # The real files: a dict with byte-string keys, 'data' uint8 (N, 3072) with each row R plane, G, B.
    data = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    batch = {b"batch_label": b"tiny", b"labels": [int(v) for v in labels], b"data": data,
             b"filenames": [b"img%d.png" % i for i in range(len(images))]}  # fmt: skip
    return pickle.dumps(batch, protocol=2)


def _tiny_arrays(per_batch: int, test: int) -> tuple[list[tuple[Any, Any]], tuple[Any, Any]]:
    import numpy as np

    train = []
    for b in range(len(TRAIN_FILES)):
        offset = b * per_batch
        train.append((known_images(per_batch, offset), (np.arange(per_batch) + offset) % 10))
    return train, (known_images(test, 1000), (np.arange(test) * 3) % 10)


def write_tiny_cifar(directory: Path, form: str, per_batch: int = 20, test: int = 10) -> TinyCifar:
    """Write a CIFAR-10-format set in ``directory``: ``form`` is "folder" (extracted) or "archive" (.tar.gz)."""
    import numpy as np

    train, (x_test, y_test) = _tiny_arrays(per_batch, test)
    files = {name: _batch_bytes(x, y) for name, (x, y) in zip(TRAIN_FILES, train, strict=True)}
    files["test_batch"] = _batch_bytes(x_test, y_test)
    files["batches.meta"] = pickle.dumps({b"label_names": [b"c%d" % i for i in range(10)]}, protocol=2)
    directory.mkdir(parents=True, exist_ok=True)
    if form == "folder":
        path = directory / "cifar-10-batches-py"
        path.mkdir()
        for name, content in files.items():
            (path / name).write_bytes(content)
    elif form == "archive":
        path = directory / "cifar-10-python.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for name, content in files.items():
                info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    else:
        raise ValueError(form)
    return TinyCifar(
        np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), x_test, y_test, path
    )


@pytest.fixture
def write_cifar() -> Callable[..., TinyCifar]:
    """``write_cifar(directory, form, per_batch=20, test=10)``: see write_tiny_cifar."""
    return write_tiny_cifar


@pytest.fixture
def script_copy(tmp_path: Path) -> Path:
    """The single file module_path("cifar10") gives, copied on its own into a fresh folder, as the SDK uploads
    it to the share."""
    from batchai_sdk.train import module_path

    folder = tmp_path / "share" / "cifar"
    folder.mkdir(parents=True)
    return Path(shutil.copy(module_path("cifar10"), folder / "cifar10.py"))


@pytest.fixture
def start_ranks(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start_ranks(args, env={}, ranks=2)``: the training module under mpirun, not waited for.

    Its stdout and stderr go to ``tmp_path/ranks-stdout.txt`` / ``ranks-stderr.txt``; whatever is still
    running at the end of the test is killed with its process group.
    """
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin)")
    started: list[subprocess.Popen[str]] = []

    def start(
        args: Sequence[str], env: dict[str, str] | None = None, ranks: int = 2
    ) -> subprocess.Popen[str]:
        command = mpirun_command(ranks, [sys.executable, "-m", "batchai_sdk.train.cifar10", *args])
        with (
            (tmp_path / "ranks-stdout.txt").open("w") as out,
            (tmp_path / "ranks-stderr.txt").open("w") as err,
        ):
            proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env={**train_env(), **(env or {})},
                                    start_new_session=True)  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
