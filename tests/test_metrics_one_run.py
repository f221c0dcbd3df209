"""A job's metrics are one run across its attempts (``log_metric`` → ``job.metrics()``, ``plot_metrics()``),
and the metrics views a user reaches from Python and the CLI: real local jobs, real faults
(``Cluster.simulate_eviction``), real files on the share."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

# Attempt a logs up to step 3(a+1), checkpointing one step short of it, then waits to be evicted; the next
# attempt resumes from the checkpoint and so logs that last step again (with another value: 100 × attempt).
RESUMABLE = """
    import os, signal, sys, time
    from batchai_sdk import log_metric
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt = int(os.environ["AZ_BATCHAI_JOB_RESTART_COUNT"])
    print("run", os.environ["AZ_BATCHAI_JOB_RUN_ID"], "attempt", attempt, flush=True)
    ckpt = os.path.join(os.environ["AZ_BATCHAI_JOB_MOUNT_ROOT"], "ckpt")
    done = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
    last = 12 if attempt >= 3 else 3 * (attempt + 1)
    for step in range(done + 1, last + 1):
        log_metric(step, loss=step + 100 * attempt)
        if step == last - 1:
            open(ckpt + ".tmp", "w").write(str(step))
            os.replace(ckpt + ".tmp", ckpt)
    if attempt < 3:
        time.sleep(120)
"""


def _rows(table: Any) -> list[dict[str, Any]]:
    """A table the SDK returned (a DataFrame, or a list of dicts without pandas) as a list of dicts."""
    rows: list[dict[str, Any]] = table.to_dict("records") if hasattr(table, "to_dict") else table
    return rows


def test_metrics_are_one_series_with_one_point_per_step_after_three_evictions(
    ws: Workspace, script: Script
) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", nodes=1)
    job = exp.create_job("resumed", cluster=cluster, python_script=str(script("r.py", RESUMABLE)))
    job.submit()
    assert _rows(job.metrics()) == []  # before the first record: empty, not an error
    for attempt in range(3):
        deadline = time.monotonic() + 60
        while not any(
            r["step"] == 3 * (attempt + 1) and r["attempt"] == attempt for r in _rows(job.metrics())
        ):
            assert time.monotonic() < deadline, (attempt, _rows(job.metrics()), job.status)
            time.sleep(0.2)
        cluster.simulate_eviction(grace_seconds=5)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason

    rows = _rows(job.metrics())
    assert [r["step"] for r in rows] == list(range(1, 13))  # one point per step, in order
    # the step an attempt logged again is the later attempt's (last write wins)
    assert [(r["attempt"], r["loss"]) for r in rows if r["step"] in (2, 3, 6, 9, 12)] == [
        (0, 2), (1, 103), (2, 206), (3, 309), (3, 312),
    ]  # fmt: skip
    # one run id in every attempt, next to the restart count
    ids = {job.tail(f"attempt-{n}/stdout.txt")[0].split()[1] for n in (1, 2, 3)} | {job.tail()[0].split()[1]}
    assert len(ids) == 1 and len(ids.pop()) == 32

    pytest.importorskip("matplotlib")
    fig = job.plot_metrics()
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["loss"].get_xdata()) == list(range(1, 13))
    assert [lines[f"restart {n}"].get_xdata()[0] for n in (1, 2, 3)] == [3, 6, 9]  # where each attempt begins


# A loss per step and a validation loss per epoch (two steps an epoch): each on its own x.
MIXED = """
    import argparse
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float, default=1.0); a = p.parse_args()
    for step in range(1, 5):
        log_metric(step, loss=a.lr / step)
        if step % 2 == 0:
            log_metric(epoch=step // 2, val_loss=a.lr / step + 0.1)
"""


def test_metrics_from_the_cli_and_plots_on_each_series_own_x(
    script: Script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = str(script("mixed.py", MIXED))
    where = ["--root", str(tmp_path / "ws"), "-e", "e"]
    ws = Workspace.local(root=tmp_path / "ws")
    ws.create_cluster("c", nodes=2)
    ws.create_experiment("e")
    assert main(["job", "create", *where, "-n", "j", "-c", "c", "--python-script", path, "--stream"]) == 0
    capsys.readouterr()

    assert main(["job", "metrics", *where, "-n", "j", "-o", "json", "--plot", "curves.png"]) == 0
    out, err = capsys.readouterr()
    records = json.loads(out)
    assert [(r.get("step"), r.get("epoch")) for r in records] == [
        (1, None), (2, None), (None, 1), (3, None), (4, None), (None, 2),
    ]  # fmt: skip
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG" and "curves.png" in err
    assert main(["job", "metrics", *where, "-n", "j", "-o", "table"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["step", "attempt", "loss", "epoch", "val_loss"] and len(table) == 8

    fig = ws.get_experiment("e").get_job("j").plot_metrics()
    (ax,) = [a for a in fig.axes if a.get_visible()]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["training"].get_xdata()) == [1, 2, 3, 4]  # per step, every point kept
    assert list(lines["validation"].get_xdata()) == [1, 2]  # per epoch
    assert ax.get_xlabel() == "step / epoch"

    # a sweep's trials overlaid, from Python and from `sweep show --plot`
    exp = ws.get_experiment("e")
    sweep = exp.sweep("s", grid={"lr": [1.0, 2.0]}, cluster="c", python_script=path)
    assert sweep.run(timeout=120, poll_interval=0.2)["state"].tolist() == ["succeeded"] * 2
    fig = sweep.plot_metrics(["loss"])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [line.get_label() for line in ax.get_lines()] == ["s-000 lr=1.0", "s-001 lr=2.0"]
    assert list(ax.get_lines()[1].get_ydata()) == [2.0, 1.0, 2 / 3, 0.5]
    assert main(["sweep", "show", *where, "-n", "s", "--plot", "sweep.png", "-o", "none"]) == 0
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"
