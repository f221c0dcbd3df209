"""_staging: a whole code directory goes to the share, .batchaiignore and the defaults obeyed, links and
size guarded; the staged tree runs (a script importing its sibling)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchai_sdk._staging import (
    CodeDirTooLargeError,
    UnsafeSymlinkError,
    code_files,
    code_hash,
    default_max_bytes,
    stage_code,
)
from batchai_sdk.exceptions import NotFoundError, ValidationError
from batchai_sdk.share import LocalShare


def project(root: Path) -> Path:
    """train.py importing helper.py and a package, plus everything a real checkout carries along."""
    files = {
        "train.py": "import helper\nfrom pkg.util import twice\nprint(helper.greet(), twice(21))\n",
        "helper.py": "def greet():\n    return 'hello from helper'\n",
        "pkg/__init__.py": "",
        "pkg/util.py": "def twice(x):\n    return 2 * x\n",
        "configs/run.yaml": "lr: 0.1\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        "__pycache__/helper.cpython-311.pyc": "x",
        "pkg/__pycache__/util.cpython-311.pyc": "x",
        "old.pyc": "x",
        ".venv/pyvenv.cfg": "home = /usr\n",
        ".venv/lib/site.py": "x",
        "myenv/pyvenv.cfg": "home = /usr\n",  # a virtual environment under any name
        "myenv/bin/python": "x",
        "data/cifar.tar.gz": "x" * 1000,
        "logs/run1.txt": "x",
        "notes.md": "keep me",
        ".batchaiignore": "# data lives on the share\ndata/\n*.txt\n!keep.txt\n",
        "keep.txt": "re-included by !keep.txt",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_code_files_obeys_defaults_and_batchaiignore(tmp_path: Path) -> None:
    src = project(tmp_path / "proj")
    assert [p.as_posix() for p in code_files(src)] == [
        ".batchaiignore",
        "configs/run.yaml",
        "helper.py",
        "keep.txt",
        "notes.md",
        "pkg/__init__.py",
        "pkg/util.py",
        "train.py",
    ]


def test_staged_two_file_project_runs(tmp_path: Path) -> None:
    src = project(tmp_path / "proj")
    share = LocalShare(tmp_path / "share")
    moved: list[int] = []
    assert (
        stage_code(share, src, "jobs/e/j/code", progress=moved.append, show_progress=False) == "jobs/e/j/code"
    )
    staged = tmp_path / "share" / "jobs" / "e" / "j" / "code"
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == sorted(
        [*(p.as_posix() for p in code_files(src)), ".batchai-code.sha256"]
    )
    assert sum(moved) == sum((src / p).stat().st_size for p in code_files(src))
    # the node runs the script in the staged folder: the sibling import resolves
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "train.py"], cwd=staged, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hello from helper 42\n"
    # unchanged: nothing is uploaded again; changed: everything is
    again: list[int] = []
    stage_code(share, src, "jobs/e/j/code", progress=again.append, show_progress=False)
    assert again == []
    (src / "helper.py").write_text("def greet():\n    return 'changed'\n")
    stage_code(share, src, "jobs/e/j/code", progress=again.append, show_progress=False)
    assert sum(again) > 0
    assert (staged / "helper.py").read_text() == "def greet():\n    return 'changed'\n"


def test_code_hash_sees_content_names_and_modes(tmp_path: Path) -> None:
    src = tmp_path / "p"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n")
    first = code_hash(src, code_files(src))
    assert code_hash(src, code_files(src)) == first
    (src / "a.py").chmod(0o755)
    assert code_hash(src, code_files(src)) != first
    (src / "a.py").chmod(0o644)
    (src / "b.py").write_text("")
    assert code_hash(src, code_files(src)) != first


def test_symlinks_inside_are_followed_outside_refused(tmp_path: Path) -> None:
    src = tmp_path / "p"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "m.py").write_text("v = 1\n")
    (src / "m_link.py").symlink_to("lib/m.py")
    (src / "lib_link").symlink_to("lib", target_is_directory=True)
    (src / "lib" / "loop").symlink_to("..", target_is_directory=True)  # back to the root: not walked twice
    assert [p.as_posix() for p in code_files(src)] == ["lib/m.py", "m_link.py"]

    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE")
    (src / "key").symlink_to(secret)
    with pytest.raises(UnsafeSymlinkError) as info:
        code_files(src)
    assert info.value.field == "source_dir"
    assert "leaves" in str(info.value) and str(secret) in str(info.value)
    (src / "key").unlink()
    (src / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafeSymlinkError, match="dangles"):
        code_files(src)


def test_size_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "p"
    src.mkdir()
    (src / "model.ckpt").write_bytes(b"\0" * 300_000)
    (src / "train.py").write_text("print(1)\n")
    with pytest.raises(CodeDirTooLargeError) as info:
        code_files(src, max_bytes=200_000)
    err = info.value
    assert isinstance(err, ValidationError)
    assert (err.total, err.limit, err.largest) == (
        300_009,
        200_000,
        [("model.ckpt", 300_000), ("train.py", 9)],
    )
    assert "model.ckpt (0.3 MiB)" in str(err) and ".batchaiignore" in str(err)
    assert len(code_files(src, max_bytes=400_000)) == 2
    monkeypatch.setenv("BATCHAI_CODE_DIR_MAX_MB", "0.1")
    assert default_max_bytes() == 104857
    with pytest.raises(CodeDirTooLargeError):
        code_files(src)
    monkeypatch.setenv("BATCHAI_CODE_DIR_MAX_MB", "lots")
    with pytest.raises(ValidationError, match="BATCHAI_CODE_DIR_MAX_MB"):
        default_max_bytes()
    monkeypatch.delenv("BATCHAI_CODE_DIR_MAX_MB")
    assert default_max_bytes() == 100 * 1024 * 1024


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="code directory"):
        code_files(tmp_path / "missing")
    (tmp_path / "f.py").write_text("")
    with pytest.raises(NotFoundError):
        code_files(tmp_path / "f.py")
