"""The hang watchdog's observe mode, on by default: a silent job's stacks are collected and its status says
it may hang, without ending it; the note goes once it writes again; a wait that times out says how long
the job has been silent and which settings deal with it. Real processes through the cluster scheduler."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import Job, JobSpec, JobState, TimeoutError, Workspace
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

GATED = """
    import faulthandler, os, signal, sys, time
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    gate = sys.argv[1]
    def wait_for_gate(n):
        while not os.path.exists(f"{gate}.{n}"):
            time.sleep(0.2)
    print("started", flush=True)
    wait_for_gate(1)
    print("resumed", flush=True)
    wait_for_gate(2)
"""


def gated_job(ws: Workspace, script: Script, gate: Path, hang_notice: float) -> Job:
    """A job that prints, then waits for ``<gate>.1``, prints again, then waits for ``<gate>.2``."""
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    return exp.create_job("gated", cluster=cluster, python_script=str(script("gated.py", GATED)),
                          args=[str(gate)], hang_notice=hang_notice).submit()  # fmt: skip


def test_a_silent_job_is_noted_with_its_stacks_and_goes_on(
    ws: Workspace, script: Script, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = gated_job(ws, script, tmp_path / "gate", hang_notice=2)
    wait_for(lambda: job.status.notice is not None, 60, "the hang notice")
    status = job.status
    assert status.state is JobState.RUNNING  # observe mode does not end the job
    notice = status.notice or ""
    node = status.nodes[0]
    assert notice.startswith(f"possibly hung — stuck: rank 0 on {node} is in gated.py:"), notice
    assert " — no output for " in notice and "; stacks in stacks-" in notice, notice
    assert "the job goes on; set hang_timeout to fail a job silent that long" in notice
    assert job.to_dict()["notice"] == notice and "possibly hung" in job._repr_html_()
    stacks = job.tail(f"stacks-{status.nodes[0]}.txt", 50)
    assert any("gated.py" in line for line in stacks), stacks
    with pytest.raises(TimeoutError) as err:
        job.wait(timeout=0.5, show_progress=False)
    assert f"(state running; {notice})" in str(err.value)
    root = str(tmp_path / "ws")  # the ws fixture's folder: the CLI opens the same workspace
    assert main(["--root", root, "job", "show", "-e", "e", "-n", "gated", "-o", "table"]) == 0
    table = capsys.readouterr().out
    assert "Notice" in table and f"stuck: rank 0 on {node} is in gated.py:" in table, table

    (tmp_path / "gate.1").touch()  # it writes again: the notice is withdrawn, the job still runs
    wait_for(lambda: job.status.notice is None, 60, "the notice to go")
    out = job.tail("stdout.txt")  # the notice came as one line of the job's output, as it happened
    assert [line for line in out if not line.startswith("[batchai] ")] == ["started", "resumed"], out
    assert [line for line in out if line.startswith("[batchai] ")] == [f"[batchai] {notice}"], out
    (tmp_path / "gate.2").touch()
    assert job.wait(timeout=60) is JobState.SUCCEEDED


def test_a_wait_that_times_out_names_the_silence_and_the_settings(
    ws: Workspace, script: Script, tmp_path: Path
) -> None:
    job = gated_job(ws, script, tmp_path / "gate", hang_notice=0)
    stdout = Path(ws.share.root) / job.paths.stdouterr / "stdout.txt"  # type: ignore[attr-defined]
    wait_for(lambda: stdout.is_file() and stdout.read_text() == "started\n", 60, "the job's first line")
    with pytest.raises(TimeoutError) as err:
        job.wait(timeout=0.5, show_progress=False)
    text = str(err.value)
    assert "to end (state running; last output " in text and " s ago; " in text, text
    assert "hang_timeout=SECONDS fails a job silent that long" in text and "hang_notice=SECONDS" in text
    (tmp_path / "gate.1").touch()
    (tmp_path / "gate.2").touch()
    assert job.wait(timeout=60) is JobState.SUCCEEDED and job.status.notice is None


def test_observe_mode_is_on_by_default_for_every_script() -> None:
    spec = JobSpec(name="j", experiment="e", cluster="c", python_script="train.py")
    assert spec.hang_notice == 600.0 and spec.notice_seconds == 600.0 and spec.hang_timeout is None
    assert (
        JobSpec(name="j", experiment="e", cluster="c", python_script="t.py", hang_notice=0).notice_seconds
        is None
    )
    with pytest.raises(ValueError, match="hang_notice"):
        JobSpec(name="j", experiment="e", cluster="c", python_script="t.py", hang_notice=-1)
