"""examples/tutorial.ipynb runs top to bottom on the local backend and plots the training curves."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"


def test_committed_notebook_has_no_outputs() -> None:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the notebook has no code"
    assert all(not c["outputs"] and c["execution_count"] is None for c in code), (
        "commit examples/tutorial.ipynb with its outputs cleared"
    )
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def venv_kernel(tmp_path: Path) -> Path:
    """A ``python3`` kernelspec that starts this interpreter, first on JUPYTER_PATH: the notebook runs
    with the test's Python (and its packages) whatever kernels the machine has installed."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return tmp_path / "jupyter"


@pytest.mark.train
def test_tutorial_notebook_runs_and_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = [
        m
        for m in (
            "nbclient",
            "nbformat",
            "ipykernel",
            "matplotlib",
            "pandas",
            "tensorflow",
            "horovod",
            "sklearn",
        )
        if importlib.util.find_spec(m) is None
    ]
    if absent or shutil.which("mpirun") is None:
        pytest.skip(
            f"needs the notebook and train extras and mpirun (missing: {', '.join(absent) or 'mpirun'})"
        )
    import nbclient
    import nbformat

    monkeypatch.setenv("JUPYTER_PATH", str(venv_kernel(tmp_path)))
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))  # nothing may land in ~/.batchai
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(work)}}
    )
    client.execute()  # raises CellExecutionError, with the cell and its traceback, when a cell fails

    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    errors = [out for out in outputs if out.output_type == "error"]
    stderr = "".join(out.text for out in outputs if out.output_type == "stream" and out.name == "stderr")
    assert not errors, errors
    assert "Traceback" not in stderr, stderr
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert images, "the training curves were not plotted"
    text = "".join(out.get("text", "") for out in outputs)
    assert "Test accuracy:" in text  # the ranks' stdout was streamed
    assert "succeeded exit code 0" in text
    assert (work / "keras_cifar10_trained_model.h5").stat().st_size > 100_000
    assert (work / ".batchai" / "mounts" / "share" / "cifar" / "metrics.jsonl").is_file()
    assert "NodeCounts(idle=0, running=0" in text  # scaled to zero at the end
    # the experiment's view: its job, succeeded, with the last epoch's validation accuracy
    views = [
        out["data"]["text/html"]
        for out in outputs
        if "Experiment cifar" in out.get("data", {}).get("text/html", "")
    ]
    assert views and "cifar_distributed" in views[0] and "succeeded" in views[0]
    assert re.search(r"val_accuracy</th>", views[0]) and re.search(r"<td>[01]\.\d{4}</td>", views[0])
