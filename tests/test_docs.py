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
# Any fenced block, also one indented in a tab or a list item.
ANY_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S
)
CODE_WIDTH = 88  # what the site's code blocks show without a scrollbar
# A line holding one string literal and nothing else: JSON cannot break it (the tutorial's job.json).
LONE_STRING = re.compile(r'^\s*"[^"]*",?$')
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_fit_without_a_scrollbar(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    wide = []
    for m in ANY_FENCE.finditer(text):
        first = text.count("\n", 0, m.start("body")) + 1
        for n, line in enumerate(m.group("body").splitlines()):
            line = line.removeprefix(m.group("indent"))
            if len(line) > CODE_WIDTH and not LONE_STRING.match(line):
                wide.append(f"{page.name}:{first + n}: {len(line)} columns")
    assert not wide, f"code lines wider than {CODE_WIDTH} columns:\n" + "\n".join(wide)


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
    # Each public name once (no section heading repeating the class's own), and no internals.
    headings = [
        html.unescape(re.sub(r"<[^>]+>", "", h)).replace("¶", "").split("(")[0].strip()
        for h in re.findall(r"<h[23][^>]*>(.*?)</h[23]>", api, re.S)
    ]
    assert "Workspace" in headings and "Job" in headings
    assert sorted({h for h in headings if headings.count(h) > 1}) == [], "headings shown twice"
    for internal in ("Workspace.backend", "Workspace.deferred_sizes", "Workspace.from_registry_entry"):
        assert f'id="batchai_sdk.{internal}"' not in api, f"{internal} is internal"
    # Code is not hidden under the copy button: the block keeps room on its right for it.
    css = (site / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert re.search(r"\.md-typeset pre > code \{\s*padding-right:", css)
    # ... with their docstrings: members that had none now say what they do.
    text = html.unescape(re.sub(r"<[^>]+>", "", api))
    for said in ("A matplotlib Figure of metrics(): a panel per metric", "Create the experiment"):
        assert said in text, f"{said!r} missing from the API reference"
    tutorial = html.unescape(re.sub(r"<[^>]+>", "", (site / "tutorial" / "index.html").read_text("utf-8")))
    # Each step shows the original az command and the batchai CLI's.
    assert "az batchai cluster create" in tutorial
    assert re.search(r"(?<!az )batchai cluster create --resource-group", tutorial)
    assert "ws.create_cluster(" in tutorial
    # Every step opens on its batchai CLI tab: the first tab of each set, the checked one.
    page = (site / "tutorial" / "index.html").read_text("utf-8")
    sets = re.findall(r'<div class="tabbed-set[^"]*"[^>]*>(.*?)<div class="tabbed-content">', page, re.S)
    assert len(sets) >= 10
    for tabs in sets:
        checked = re.search(r'<input checked="checked" id="(?P<id>[^"]+)"', tabs)
        assert checked is not None
        label = re.search(rf'<label for="{checked["id"]}">(?P<text>[^<]*)</label>', tabs)
        assert label is not None and label["text"] == "batchai CLI", tabs[:300]


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
