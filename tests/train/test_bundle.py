"""batchai_sdk.train.bundle: one file from a script and the sibling modules it imports, cached once.

Small packages written to a temporary folder, bundled, then run as plain files by a real interpreter.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from batchai_sdk._staging import resolve_local_script
from batchai_sdk.train import SCRIPTS, bundle, module_path

pytestmark = pytest.mark.train

SRC = Path(__file__).resolve().parents[2] / "src"


def _write(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    return folder


# A diamond: app imports shapes and colours, both import base; app also imports base itself.
DIAMOND = {
    "base": '"""Base."""\n\nfrom __future__ import annotations\n\nimport os\n\nUNIT = 2\n',
    "shapes": (
        '"""Shapes."""\n\nfrom __future__ import annotations\n\nimport os\n\nfrom .base import UNIT\n\n\n'
        "def area(side: int) -> int:\n    return side * side * UNIT\n"
    ),
    "colours": (
        "from __future__ import annotations\n\nfrom .base import (\n    UNIT,\n)\n\nRED = f'red-{UNIT}'\n"
    ),
    "app": (
        '"""The app: prints an area and a colour.\\n\\nWith an escaped \\\\d in its docstring."""\n\n'
        "from __future__ import annotations\n\nimport sys\n\n"
        "from .base import UNIT\nfrom .colours import RED\nfrom .shapes import area\n\n\n"
        "def main() -> int:\n    print(area(3), RED, UNIT, __doc__.splitlines()[0])\n    return 0\n\n\n"
        'if __name__ == "__main__":\n    sys.exit(main())\n'
    ),
}


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, cwd=script.parent,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_modules_are_inlined_dependencies_first_and_the_file_runs_alone(tmp_path: Path) -> None:
    pkg = _write(tmp_path / "pkg", DIAMOND)
    assert bundle.dependency_order("app", pkg) == ["base", "colours", "shapes", "app"]
    text = bundle.bundle_source("app", pkg)
    tree = ast.parse(text)
    assert (
        ast.get_docstring(tree)
        == "The app: prints an area and a colour.\n\nWith an escaped \\d in its docstring."
    )
    assert text.count("from __future__ import annotations") == 1
    assert text.count("import os\n") == 1  # a repeated import is dropped
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]
    assert text.rstrip().endswith('if __name__ == "__main__":\n    sys.exit(main())')
    out = tmp_path / "alone" / "app.py"
    out.parent.mkdir()
    out.write_text(text)
    proc = _run(out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "18 red-2 2 The app: prints an area and a colour."


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a": "from .b import x\n", "b": "from .a import y\n"}, "import cycle: a -> b -> a"),
        ({"a": "from .b import x as y\n", "b": "x = 1\n"}, "no 'as' or '\\*'"),
        ({"a": "from .b import *\n", "b": "x = 1\n"}, "no 'as' or '\\*'"),
        ({"a": "from . import b\n", "b": "x = 1\n"}, "only 'from .module import name'"),
        ({"a": "def f():\n    from .b import x\n", "b": "x = 1\n"}, "a.py:2: a relative import must be at the top"),
        ({"a": "from .b import x\nx = 2\n", "b": "x = 1\n"}, "'x' is defined in both b.py and a.py"),
        ({"a": "from .b import y\nimport json as x\n", "b": "x = 1\ny = 2\n"}, "a.py imports 'x', which b.py"),
        ({"a": "from .b import y\nimport json as j\n", "b": "import pickle as j\ny = 2\n"}, "'j' is pickle in b.py"),
        ({"a": "from .b import y\n", "b": "y = 1\nif __name__ == '__main__':\n    y = 2\n"}, "b.py has an 'if __name"),
        ({"a": "from .missing import y\n"}, "cannot read .*missing.py"),
    ],
)  # fmt: skip
def test_what_cannot_be_bundled_correctly_is_an_error(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    pkg = _write(tmp_path / "pkg", files)
    with pytest.raises(bundle.BundleError, match=message):
        bundle.bundle_source("a", pkg)


@pytest.fixture
def diamond(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The DIAMOND package, with bundles cached under ``tmp_path/cache`` (``XDG_CACHE_HOME``)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return _write(tmp_path / "pkg", DIAMOND)


def next_version(pkg: Path) -> None:
    """Change a source of the package, as an installed upgrade does."""
    (pkg / "base.py").write_text(DIAMOND["base"].replace("UNIT = 2", "UNIT = 3"))


def test_bundles_are_written_once_under_xdg_cache_home(tmp_path: Path, diamond: Path) -> None:
    pkg = diamond
    first = bundle.bundled_script("app", pkg)
    assert first.name == "app.py" and first.parent.parent == tmp_path / "cache" / "batchai_sdk" / "train"
    assert first.read_text() == bundle.bundle_source("app", pkg)
    stamp = first.stat()
    assert bundle.bundled_script("app", pkg) == first
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (
        stamp.st_ino,
        stamp.st_mtime_ns,
    )  # not rewritten
    assert [p.name for p in first.parent.iterdir()] == ["app.py"]  # no temporary file left
    # Another source, another file: an installed upgrade never runs a stale bundle.
    next_version(pkg)
    second = bundle.bundled_script("app", pkg)
    assert second != first and "UNIT = 3" in second.read_text() and "UNIT = 2" in first.read_text()


def test_an_unusable_cache_home_falls_back_to_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-folder"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    path = bundle.bundled_script("app", _write(tmp_path / "pkg", DIAMOND))
    assert str(path).startswith(str(tmp_path / "tmp")) and path.is_file()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert bundle.cache_roots()[0] == tmp_path / "home" / ".cache" / "batchai_sdk" / "train"


def test_module_path_gives_each_shipped_script_as_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in SCRIPTS:
        path = module_path(name)
        assert path.name == f"{name}.py" and tmp_path / "cache" in path.parents
        assert path.read_text() == bundle.bundle_source(name)
        assert module_path(name) == path


def test_the_command_writes_the_bundle_where_asked(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "batchai_sdk.train.bundle"]
    proc = subprocess.run([*command, "cifar10", "cifar_cnn_distributed.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cifar_cnn_distributed.py"
    written = (tmp_path / "cifar_cnn_distributed.py").read_text()
    assert written == module_path("cifar10").read_text()
    proc = subprocess.run(
        [*command, "cifar10_torch", "-"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout == bundle.bundle_source("cifar10_torch")
    proc = subprocess.run([*command, "imagenet"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "invalid choice: 'imagenet'" in proc.stderr


def test_a_job_naming_a_shipped_script_uploads_its_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_local_script("batchai_sdk.train.cifar10") == module_path("cifar10")
    assert resolve_local_script("batchai_sdk.train.cifar10_torch") == module_path("cifar10_torch")
    assert resolve_local_script("batchai_sdk.train.datasets") is None  # a part, not a script: NotFoundError


def test_a_new_bundle_removes_bundles_unused_for_a_month_and_keeps_the_rest(diamond: Path) -> None:
    pkg = diamond
    in_use = bundle.bundled_script("app", pkg)
    root = in_use.parent.parent
    stale, recent = root / ("0" * 16), root / ("1" * 16)
    for old in (stale, recent):
        old.mkdir()
        (old / "app.py").write_text("an older version's bundle\n")
    month_ago = time.time() - 31 * 86400
    os.utime(stale, (month_ago, month_ago))
    os.utime(in_use.parent, (month_ago, month_ago))
    assert bundle.bundled_script("app", pkg) == in_use  # a use marks it used
    next_version(pkg)
    newest = bundle.bundled_script("app", pkg)  # a new bundle written: the stale one goes
    assert newest.is_file() and in_use.is_file() and (recent / "app.py").is_file()
    assert not stale.exists()
