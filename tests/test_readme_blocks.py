"""The README's code blocks run as pasted: extracted from the page, run verbatim in a fresh folder with a
fresh ``$BATCHAI_HOME``, offline. The getting-started page's Python blocks run in test_docs; every other
block of both pages is accounted for here (run, or named with the reason it is not)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```\s*$", re.M | re.S)

# Blocks no test runs, by their first line, with the reason. Everything else on these pages runs.
NOT_RUN = {
    "./dev quickstart": "installs the toolchain (10 minutes) and runs the whole suite: CI itself runs it",
    "scripts/bootstrap.sh": "installs the toolchain: CI's bootstrap is this line",
}
OUTPUT = ("text", "console-output")  # what a block printed, not code


def not_run(code: str) -> str | None:
    """Why no test runs this block (None: one does)."""
    return next((why for start, why in NOT_RUN.items() if code.startswith(start)), None)


def blocks(page: Path) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of a Markdown page, in order."""
    return [(m["lang"], m["body"]) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def readme_code() -> tuple[str, list[str]]:
    """The README's Python block and its bash blocks that run, in order."""
    python = [code for lang, code in blocks(README) if lang == "python"]
    bash = [code for lang, code in blocks(README) if lang == "bash" and not_run(code) is None]
    assert len(python) == 1, "the README's Python snippet"
    return python[0], bash


def test_every_block_runs_or_says_why_not() -> None:
    for page in (README, GETTING_STARTED):
        for lang, code in blocks(page):
            assert lang in ("python", "bash", *OUTPUT), f"{page.name}: a ```{lang} block no test runs"
            if lang == "bash" and page is GETTING_STARTED:
                assert not_run(code), f"{page.name}: a bash block no test runs: {code[:60]}"
    _, bash = readme_code()
    assert len(bash) == 2, "the README's CLI blocks: the workspace Python made, and the tutorial's"


def _run(code: str, *, shell: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [shell, "-e", "-c", code] if shell == "bash" else [sys.executable, "-c", code]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def _environment(tmp_path: Path) -> dict[str, str]:
    """A fresh user's: the venv's python and batchai first on PATH, a new $BATCHAI_HOME, no network
    needed (the digits images ship with scikit-learn)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCHAI_", "AZURE_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["BATCHAI_HOME"] = str(tmp_path / "home")
    return env


def _needs_training() -> None:
    absent = [m for m in ("tensorflow", "horovod", "sklearn") if importlib.util.find_spec(m) is None]
    if absent or shutil.which("mpirun") is None:
        pytest.skip(f"needs the train extra and mpirun (missing: {', '.join(absent) or 'mpirun'})")


@pytest.mark.train
@pytest.mark.mpi
def test_the_readme_snippet_and_the_cli_beside_it_run_as_pasted(tmp_path: Path) -> None:
    _needs_training()
    python, bash = readme_code()
    work = tmp_path / "work"
    work.mkdir()
    env = _environment(tmp_path)
    proc = _run(python, shell="python", cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "steady NodeCounts(idle=2" in proc.stdout
    assert "Test accuracy:" in proc.stdout
    assert (work / "model.h5").read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"

    # the CLI, with no -g/-w, sees the job Python made; the job it makes is Python's to see
    proc = _run(bash[0], shell="bash", cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout.splitlines()
    assert table[0].split()[:2] == ["Name", "Resource"] and table[2].split()[:3] == [
        "cifar_distributed",
        "local2",
        "2",
    ]
    assert '"succeeded"' in table
    assert table[-2:] == [os.uname().nodename] * 2  # `hostname` from both ranks of the CLI's job
    check = "from batchai_sdk import Workspace\nprint(Workspace.local().get_experiment('cifar').get_job('hello').state)"
    proc = _run(check, shell="python", cwd=work, env=env)
    assert proc.stdout.strip() == "succeeded", proc.stderr


@pytest.mark.train
@pytest.mark.mpi
def test_the_readme_tutorial_commands_run_as_pasted(tmp_path: Path) -> None:
    _needs_training()
    _, bash = readme_code()
    work = tmp_path / "checkout"  # the block runs in a checkout: the one file it reads from it
    (work / "tests" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "tutorial_job.json", work / "tests" / "data")
    proc = _run(bash[1], shell="bash", cwd=work, env=_environment(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Saved trained model" in proc.stdout and "Test accuracy:" in proc.stdout
    assert (work / "keras_cifar10_trained_model.h5").read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
