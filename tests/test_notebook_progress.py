"""Progress in a notebook without ipywidgets: a real Jupyter kernel (nbclient) uploads a file and waits on
a job; each shows one HTML line updated in place (display_id), ending on the outcome."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

CELLS = [
    "from batchai_sdk import Workspace\n"
    "ws = Workspace.local(root='ws')\n"
    "open('big.bin', 'wb').write(b'0' * 3_000_000)\n"
    "ws.share.upload('big.bin', 'data/big.bin')",
    "exp = ws.create_experiment('e')\n"
    "cluster = ws.create_cluster('c', nodes=1)\n"
    "job = exp.create_job('j', cluster=cluster, command_line='sleep 1; echo done').submit()\n"
    "print(job.wait(timeout=60))",
]


@pytest.mark.mpi
def test_uploads_and_waits_show_one_updated_line_in_a_notebook(tmp_path: Path) -> None:
    absent = [m for m in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]
    if absent or shutil.which("mpirun") is None:
        pytest.skip(f"needs the notebook extra and mpirun (missing: {', '.join(absent) or 'mpirun'})")
    import nbclient
    import nbformat

    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    kernel = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
              "display_name": "test", "language": "python"}  # fmt: skip
    (spec_dir / "kernel.json").write_text(json.dumps(kernel))
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]  # type: ignore[no-untyped-call]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
        mp.setenv("BATCHAI_HOME", str(tmp_path / "home"))
        mp.delenv("BATCHAI_PROGRESS", raising=False)
        nbclient.NotebookClient(
            nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
        ).execute()

    upload, wait = ([o for o in cell.outputs if "text/html" in o.get("data", {})] for cell in nb.cells)
    assert len(upload) == 1 and len(wait) == 1  # one line each, updated in place: no trail of outputs
    line = upload[0]["data"]["text/html"]
    assert "<progress value='3000000' max='3000000'" in line and "upload big.bin: 3.0 MB in " in line
    assert "job j: " in wait[0]["data"]["text/html"]
    assert "succeeded" in "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert not any(o.output_type == "error" for cell in nb.cells for o in cell.outputs)
