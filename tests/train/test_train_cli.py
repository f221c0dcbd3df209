"""The training scripts as commands and as the one file to upload: --help, usage errors, self-containment,
module_path."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numpy")

from batchai_sdk.train import module_path

pytestmark = pytest.mark.train

SRC = Path(__file__).resolve().parents[2] / "src"
OPTIONS = ["--dir", "--epochs", "--batch-size", "--lr", "--dataset", "--data-dir", "--no-augmentation",
           "--mixed-precision", "--warmup-epochs", "--resume", "--seed", "--max-train-samples",
           "--max-test-samples", "--verbose"]  # fmt: skip
# What the nodes are guaranteed to have: the standard library and the training stack.
ALLOWED_IMPORTS = set(sys.stdlib_module_names) | {"numpy", "tensorflow", "horovod", "sklearn"}


def _python(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd
    )


def test_help_documents_every_option_without_importing_tensorflow() -> None:
    code = (
        "import sys\n"
        "from batchai_sdk.train import cifar10\n"
        "try:\n"
        "    cifar10.main(['--help'])\n"
        "except SystemExit as exc:\n"
        "    print('TENSORFLOW LOADED' if 'tensorflow' in sys.modules else 'no tensorflow')\n"
        "    raise\n"
    )
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    for option in OPTIONS:
        assert option in proc.stdout
    assert "sharded" in proc.stdout and "ceil(100/N)" in proc.stdout  # the epochs/sharding choice
    assert "metrics.jsonl" in proc.stdout
    assert proc.stdout.rstrip().endswith("no tensorflow")


def test_module_help_exits_0() -> None:
    proc = _python("-m", "batchai_sdk.train.cifar10", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--resume" in proc.stdout


def test_missing_dir_is_a_usage_error() -> None:
    proc = _python("-m", "batchai_sdk.train.cifar10", "--dataset", "digits")
    assert proc.returncode == 2
    assert "-d/--dir" in proc.stderr and "required" in proc.stderr


def test_importing_the_package_does_not_import_tensorflow() -> None:
    proc = _python("-c", "import sys, batchai_sdk.train; print('tensorflow' in sys.modules)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_module_path_points_at_the_uploadable_script() -> None:
    path = module_path()
    assert path.name == "cifar10.py" and path.is_file()
    assert path == module_path("cifar10")
    with pytest.raises(
        ValueError, match="no training script named 'imagenet'; available: cifar10, cifar10_torch"
    ):
        module_path("imagenet")
    with pytest.raises(ValueError):
        module_path("../cifar10")


@pytest.mark.parametrize(
    ("name", "framework"), [("cifar10", {"tensorflow", "horovod"}), ("cifar10_torch", {"torch"})]
)
def test_script_imports_only_what_the_nodes_have(name: str, framework: set[str]) -> None:
    tree = ast.parse(module_path(name).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import in a script that runs on its own"
            imported.add((node.module or "").split(".")[0])
    # torch's file names tensorflow too: Keras' CIFAR-10 download, used only without --data-dir
    assert imported - ALLOWED_IMPORTS - {"torch"} == set()
    assert framework <= imported


@pytest.mark.parametrize("name", ["cifar10", "cifar10_torch"])
def test_script_runs_alone_without_batchai_sdk(tmp_path: Path, name: str) -> None:
    copy = tmp_path / "cifar_cnn_distributed.py"  # the tutorial's name for it
    copy.write_bytes(module_path(name).read_bytes())
    blocker = (
        "import runpy, sys; sys.modules['batchai_sdk'] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    proc = _python("-c", blocker, str(copy), "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "usage: cifar_cnn_distributed.py" in proc.stdout
    assert "--max-train-samples" in proc.stdout
