"""The docs site builds strictly, and the getting-started page runs exactly as written."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.M | re.S)


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """(line number, code) of every ```python block of a Markdown page, in order."""
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m.group("body"))
        for m in FENCE.finditer(text)
        if m.group("lang") == "python"
    ]


def missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def test_getting_started_blocks_are_valid_python() -> None:
    blocks = python_blocks(GETTING_STARTED)
    assert len(blocks) >= 6, "the getting-started page lost its code"
    for line, code in blocks:
        compile(code, f"{GETTING_STARTED.name}:{line}", "exec")


def test_docs_build_strictly(tmp_path: Path) -> None:
    absent = missing("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
    if absent:
        pytest.skip(f"the docs toolchain is not installed ({', '.join(absent)}): pip install -e '.[dev]'")
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # The API reference is rendered from the docstrings, not left as ::: directives.
    for anchor in ("batchai_sdk.Workspace.create_cluster", "batchai_sdk.Job.stream", "batchai_sdk.NodeError"):
        assert f'id="{anchor}"' in api, f"{anchor} missing from the API reference"
    assert ":::" not in api
    tutorial = html.unescape(re.sub(r"<[^>]+>", "", (site / "tutorial" / "index.html").read_text("utf-8")))
    # Each step shows the original az command and the batchai CLI's.
    assert "az batchai cluster create" in tutorial
    assert re.search(r"(?<!az )batchai cluster create --resource-group", tutorial)
    assert "ws.create_cluster(" in tutorial


@pytest.mark.train
def test_getting_started_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = missing("tensorflow", "horovod", "sklearn")
    if absent or shutil.which("mpirun") is None:
        pytest.skip(f"needs the train extra and mpirun (missing: {', '.join(absent) or 'mpirun'})")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    namespace: dict[str, object] = {"__name__": "__getting_started__"}
    for line, code in python_blocks(GETTING_STARTED):
        exec(compile(code, f"{GETTING_STARTED.name}:{line}", "exec"), namespace)

    out = capsys.readouterr().out
    assert "steady NodeCounts(idle=2" in out
    assert "Test accuracy:" in out  # streamed from the ranks' stdout
    assert "succeeded 0" in out
    assert (work / "model.h5").stat().st_size > 100_000
    assert "0 nodes" in out
    # Everything went to BATCHAI_HOME, as the page says, not to ~/.batchai.
    assert (tmp_path / "home" / "mounts" / "share" / ".batchai" / "workspace.json").is_file()
