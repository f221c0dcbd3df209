"""What a notebook shows of real jobs on the local backend: an experiment's jobs (state, duration, last
val_accuracy), a failed job's failure line and stderr tail, long lines wrapped, the workspace's backend
named once, and the wait spinner counting the job's own time."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace

Script = Callable[[str, str], Path]


class View(HTMLParser):
    """An HTML repr read as a user sees it: its text, its table rows (cell texts), its <pre> styles."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.rows: list[list[str]] = []
        self.pre_styles: list[str] = []
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "pre":
            self.pre_styles.append(dict(attrs).get("style") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def row(self, header: str) -> str:
        return next(cells[1] for cells in self.rows if cells[:1] == [header])


@pytest.fixture
def exp_jobs(ws: Workspace, script: Script) -> Iterator[Workspace]:
    """Experiment 'e' with a job that trains ('good': two epochs of metrics, val_accuracy last 0.75) and
    one that fails ('bad': exit code 3 after a long line on stderr)."""
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_D2_v2", nodes=1)
    good = script(
        "good.py",
        """
        import json, os, time
        path = os.path.join(os.environ["AZ_BATCHAI_STDOUTERR_DIR"], "metrics.jsonl")
        with open(path, "w") as f:
            for epoch, acc in ((1, 0.5), (2, 0.75)):
                f.write(json.dumps({"epoch": epoch, "accuracy": acc, "val_accuracy": acc}) + "\\n")
        time.sleep(1.5)
        print("trained")
        """,
    )
    bad = script(
        "bad.py",
        """
        import sys
        print("starting")
        print("loading shard " + "x" * 400, file=sys.stderr)
        print("ValueError: the data set is empty", file=sys.stderr)
        sys.exit(3)
        """,
    )
    jobs = [
        exp.create_job("good", cluster=cluster, python_script=str(good)),
        exp.create_job("bad", cluster=cluster, python_script=str(bad)),
    ]
    for job in jobs:
        job.submit()
    for job in jobs:
        job.wait(timeout=120)
    yield ws


def test_an_experiment_shows_its_jobs_state_duration_cost_and_final_metrics(exp_jobs: Workspace) -> None:
    exp = exp_jobs.get_experiment("e")
    view = View(exp._repr_html_())
    assert "Experiment e" in view.text
    header, *rows = view.rows
    assert header == ["job", "state", "duration", "cost", "accuracy", "val_accuracy"]  # the metrics it has
    by_job = {cells[0]: cells[1:] for cells in rows}
    assert by_job["bad"][0] == "failed" and by_job["bad"][2:] == ["$0.00", "—", "—"]
    state, shown, cost, accuracy, val_accuracy = by_job["good"]
    assert state == "succeeded" and cost == "$0.00" and accuracy == val_accuracy == "0.7500"
    minutes, seconds = (int(x) for x in shown.split(":"))
    assert 1 <= minutes * 60 + seconds <= 120  # it slept 1.5 s


def test_a_failed_jobs_view_shows_its_failure_line_and_stderr_tail_wrapped(exp_jobs: Workspace) -> None:
    job = exp_jobs.get_experiment("e").get_job("bad")
    assert job.state is JobState.FAILED
    view = View(job._repr_html_())
    assert view.row("failure").startswith("job 'bad' failed (exit code 3): ")
    stderr = view.row("stderr.txt").splitlines()
    assert stderr[-2:] == ["loading shard " + "x" * 400, "ValueError: the data set is empty"]
    assert view.row("stdout.txt") == "starting"
    # the 414-character line wraps instead of widening the output area
    assert view.pre_styles and all("white-space:pre-wrap" in style for style in view.pre_styles)
    good = View(exp_jobs.get_experiment("e").get_job("good")._repr_html_())
    assert "stderr.txt" not in [cells[0] for cells in good.rows]  # shown for a failed job only
    assert not any(cells[0] == "failure" for cells in good.rows)


def test_the_workspace_view_names_its_backend_once(ws: Workspace) -> None:
    ws.create_experiment("e")
    view = View(ws._repr_html_())
    words = " ".join(t for t in view.texts if not t.startswith("/"))  # paths may say anything
    assert words.count("local") == 1, view.rows
    assert "Workspace local" in view.text and view.row("experiments") == "e"


def test_the_wait_spinner_counts_the_jobs_own_running_time(
    ws: Workspace, script: Script, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_D2_v2", nodes=1)
    job = exp.create_job(
        "slow", cluster=cluster, python_script=str(script("s.py", "import time; time.sleep(9)"))
    )
    job.submit()
    deadline = time.monotonic() + 60
    while job.state is JobState.QUEUED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.state is JobState.RUNNING
    time.sleep(4)  # the job has run 4 s before this wait begins
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws its spinner as on a terminal
    monkeypatch.setenv("TERM", "xterm")  # a "dumb" terminal inherited from the caller draws no frames
    monkeypatch.setenv("COLUMNS", "200")  # the running time is never cropped
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    capsys.readouterr()
    assert job.wait(timeout=60, poll_interval=0.3, show_progress=True) is JobState.SUCCEEDED
    shown = [
        int(m) * 60 + int(s) for m, s in re.findall(r"running for (\d+):(\d\d)", capsys.readouterr().err)
    ]
    assert shown, "the spinner showed no running time"
    assert shown[0] >= 4  # not 0: the job's time, not this wait's
