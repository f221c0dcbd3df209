"""A failed job's reason is the failing rank's last exception line with the file and line that raised it,
whole even when the rank wrote it in pieces, and it names the job preparation the local backend skipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.node.job.rank import last_error_line

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]


def test_the_last_exception_line_gets_the_raising_frames_place() -> None:
    lines = [
        b"Traceback (most recent call last):",
        b'  File "/share/wd/train.py", line 3, in <module>',
        b"    from helpers import make_data",
        b'  File "/share/wd/helpers.py", line 7, in <module>',
        b"    import sklearn_nope",
        b"ModuleNotFoundError: No module named 'sklearn_nope'",
    ]
    assert last_error_line(lines) == "ModuleNotFoundError: No module named 'sklearn_nope' (helpers.py:7)"
    assert last_error_line([b"error: no data in /x"]) == "error: no data in /x"
    assert last_error_line([b"just a line"]) == "just a line"


def failed(ws: Workspace, script: Path, **options: object) -> str:
    cluster = ws.create_cluster("c", nodes=1, exist_ok=True)
    exp = ws.create_experiment("e", exist_ok=True)
    job = exp.create_job(cluster=cluster, python_script=str(script), **options).submit()  # type: ignore[arg-type]
    assert job.wait(timeout=120) is JobState.FAILED
    return job.status.failure_reason or ""


def test_an_import_time_traceback_keeps_its_lines_apart(ws: Workspace, script: Script) -> None:
    path = script(
        "train.py",
        """\
        import sys, time
        print("make_data", file=sys.stderr, flush=True)
        time.sleep(0.3)  # the traceback comes in another read than the line before it
        import no_such_module_here
        """,
    )
    reason = failed(ws, path)
    assert "ModuleNotFoundError: No module named 'no_such_module_here' (train.py:4)" in reason
    assert "make_dataModuleNotFoundError" not in reason


def test_a_syntax_error_names_its_file_and_line(ws: Workspace, script: Script) -> None:
    reason = failed(ws, script("broken.py", "x = 1\ny = (\n"))
    assert "SyntaxError: '(' was never closed (broken.py:2)" in reason


def test_a_skipped_preparation_is_named_when_the_job_then_fails(ws: Workspace, script: Script) -> None:
    path = script("needs.py", "import tensorboardx_nope\n")
    reason = failed(ws, path, job_preparation="pip install tensorboardx_nope")
    assert "No module named 'tensorboardx_nope'" in reason
    assert "job preparation skipped: 'pip install tensorboardx_nope' would install packages" in reason
    assert "source_dir" not in reason  # not a module beside the script: no hint that would not help


def test_a_pytorch_rank_aborted_at_exit_by_gloos_threads_gets_the_known_cause(
    ws: Workspace, script: Script
) -> None:
    # What torch 2.14 prints when a Gloo thread outlives the interpreter (pytorch/pytorch#190489).
    path = script(
        "ends.py",
        """\
        import os, sys
        print("trained", flush=True)
        print("terminate called without an active exception", file=sys.stderr, flush=True)
        os.abort()
        """,
    )
    reason = failed(ws, path, toolkit="pytorch")
    assert "terminate called without an active exception" in reason
    assert "pytorch/pytorch#190489" in reason and "time.sleep(0.2)" in reason
    # The same abort outside a PyTorch job is not blamed on Gloo.
    assert "pytorch/pytorch#190489" not in failed(ws, path, toolkit="horovod")
