"""Hyperparameter sweeps (``Experiment.sweep``, ``batchai sweep``) and the metrics a user script logs
(``batchai_sdk.log_metric`` / ``log_params``): real local jobs under mpirun, real files on the share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import batchai_sdk
from batchai_sdk import EarlyStop, JobState, RerunChangedWarning, SweepDrivenError, ValidationError, Workspace
from batchai_sdk.cli import main
from batchai_sdk.tuning import grid_points, parse_param, random_points

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

# Logs `score` = lr * batch for 3 steps, and when it ran (start/end files, to check the concurrency limit).
TRIAL = """
    import argparse, os, time
    from batchai_sdk import log_metric, log_params
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float); p.add_argument("--batch", type=int); p.add_argument("--epochs", type=int)
    a = p.parse_args()
    marks = os.path.join(os.environ["AZ_BATCHAI_JOB_MOUNT_ROOT"], "marks")
    os.makedirs(marks, exist_ok=True)
    name = os.environ["AZ_BATCHAI_JOB_NAME"]
    open(os.path.join(marks, name + ".start"), "w").write(repr(time.time()))
    log_params(optimizer="sgd")
    for step in range(1, a.epochs + 1):
        log_metric(step, score=a.lr * a.batch * step, loss=1.0 / step)
    open(os.path.join(marks, name + ".end"), "w").write(repr(time.time()))
"""


def test_a_grid_sweep_runs_each_point_within_the_concurrency_limit(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("tune")
    cluster = ws.create_cluster("c", nodes=2)
    sweep = exp.sweep(
        "grid",
        grid={"lr": [0.1, 0.5], "batch": [2, 4]},
        max_concurrent=2,
        cluster=cluster,
        python_script=str(script("trial.py", TRIAL)),
        args=["--epochs", "3"],
    )
    assert [t["params"] for t in sweep.trials] == [
        {"lr": 0.1, "batch": 2}, {"lr": 0.1, "batch": 4}, {"lr": 0.5, "batch": 2}, {"lr": 0.5, "batch": 4},
    ]  # fmt: skip
    rows = sweep.run(timeout=240, poll_interval=0.2).to_dict("records")  # a DataFrame: pandas is here

    assert [r["state"] for r in rows] == ["succeeded"] * 4
    by_job = {r["job"]: r for r in rows}
    assert by_job["grid-003"]["score"] == pytest.approx(0.5 * 4 * 3)  # the final step's value
    assert by_job["grid-000"]["loss"] == pytest.approx(1 / 3)
    # never more than 2 trials at once: order the start and end marks and count
    marks = Path(ws.share.root) / "marks"  # type: ignore[attr-defined]
    events = sorted(
        [(float((marks / f"grid-00{i}.start").read_text()), 1) for i in range(4)]
        + [(float((marks / f"grid-00{i}.end").read_text()), -1) for i in range(4)]
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak <= 2
    table = sweep.table().splitlines()
    assert table[0].split() == ["job", "state", "lr", "batch", "score", "loss", "goodput"]
    assert all(0 <= r["goodput"] <= 1 for r in rows), rows  # productive step time / wall time, per trial
    assert sweep.best("score")["job"] == "grid-003"  # type: ignore[index]
    # the experiment's table: hyperparameters from the arguments and log_params, whatever metrics exist
    results = {r["job"]: r for r in exp.results(frame=False)}
    assert results["grid-001"]["lr"] == 0.1 and results["grid-001"]["epochs"] == 3
    assert results["grid-001"]["optimizer"] == "sgd" and results["grid-001"]["cost"] == "$0.00"
    html = exp._repr_html_()
    assert "score" in html and "optimizer" in html and "val_accuracy" not in html
    # run() again: nothing is submitted twice
    assert exp.get_sweep("grid").run(timeout=30).to_dict("records") == rows


# Steps are logged as the quality says; the bad trial then waits for a file nobody writes: only an early
# stop ends it before the test's timeout.
STOPPABLE = """
    import argparse, os, time
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--quality", type=float); a = p.parse_args()
    steps = 1 if a.quality < 2 else 3
    for step in range(1, steps + 1):
        log_metric(step, accuracy=a.quality / 10)
    if a.quality < 2:
        deadline = time.time() + 120
        while time.time() < deadline and not os.path.exists("/nonexistent/gate"):
            time.sleep(0.2)
"""


def test_early_stop_terminates_a_trial_worse_than_the_median(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("tune")
    cluster = ws.create_cluster("c", nodes=3)
    sweep = exp.sweep(
        "stop",
        grid={"quality": [5, 6, 1]},
        max_concurrent=3,
        early_stop=EarlyStop("accuracy", "max"),
        cluster=cluster,
        python_script=str(script("stoppable.py", STOPPABLE)),
    )
    rows = {r["job"]: r for r in sweep.run(timeout=100, poll_interval=0.2).to_dict("records")}
    assert rows["stop-000"]["state"] == rows["stop-001"]["state"] == "succeeded"
    assert rows["stop-002"]["state"] == "terminated"
    assert "stopped early at step 1: accuracy worse than the median" in rows["stop-002"]["note"]


def test_the_cli_runs_a_sweep_and_prints_its_table(
    script: Script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    g = ["-g", "rg", "-w", "ws"]
    for argv in (
        ["group", "create", "--name", "rg", "--location", "eastus"],
        ["workspace", "create", "-g", "rg", "--workspace", "ws"],
        ["experiment", "create", *g, "--name", "e"],
        ["cluster", "create", *g, "--name", "c", "--target", "2"],
    ):
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    path = script("trial.py", TRIAL)
    code = main(["sweep", "create", *g, "-e", "e", "-n", "s", "-c", "c", "--python-script", str(path),
                 "--script-args", "--epochs 2", "--param", "lr=0.1,0.2", "--param", "batch=3",
                 "--max-concurrent", "2", "-o", "table"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["job", "state", "lr", "batch", "score", "loss", "goodput"]
    assert any("s-001" in line and "succeeded" in line and "1.2" in line for line in lines)
    assert "submitted s-000" in err and "sweep s: 2 trial(s), about $0.00 at an hour each" in err
    assert main(["sweep", "show", *g, "-e", "e", "-n", "s", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(r["job"], r["lr"], round(r["score"], 6)) for r in shown] == [
        ("s-000", 0.1, 0.6),
        ("s-001", 0.2, 1.2),
    ]
    assert all(0 <= r["goodput"] <= 1 for r in shown), shown
    assert main(["sweep", "create", *g, "-e", "e", "-n", "t", "-c", "c", "--python-script", str(path),
                 "--param", "lr=loguniform:1e-4:1e-1"]) == 2  # fmt: skip
    assert "give --random N" in capsys.readouterr().err


def test_sweep_points_are_checked_and_reproducible() -> None:
    assert len(grid_points({"a": [1, 2, 3], "b": ["x", "y"]})) == 6
    space = {"lr": ("loguniform", 1e-4, 1e-1), "batch": [32, 64], "layers": ("randint", 1, 3)}
    first = random_points(space, 5, seed=7)
    assert first == random_points(space, 5, seed=7) and len(first) == 5
    assert all(1e-4 <= p["lr"] <= 1e-1 and p["batch"] in (32, 64) and p["layers"] in (1, 2, 3) for p in first)
    assert parse_param("lr=0.1,0.01") == ("lr", [0.1, 0.01])
    assert parse_param("opt=adam,sgd") == ("opt", ["adam", "sgd"])
    assert parse_param("lr=loguniform:1e-4:1e-1") == ("lr", ("loguniform", 1e-4, 1e-1))
    for bad in ("lr", "=1", "lr=uniform:1"):
        with pytest.raises(ValidationError, match="--param"):
            parse_param(bad)
    with pytest.raises(ValidationError, match=r"grid\['lr'\]"):
        grid_points({"lr": []})
    with pytest.raises(ValidationError, match="loguniform bounds > 0"):
        random_points({"lr": ("loguniform", 0, 1)}, 2)
    rule = EarlyStop("loss", "min", grace=2)
    assert not rule.should_stop([9.0], [[1.0], [1.0]])  # within the grace period
    assert rule.should_stop([9.0, 8.0], [[1.0, 0.5], [2.0, 1.0], [3.0]])  # 8 > median(0.5, 1.0)
    assert not rule.should_stop([9.0, 0.7], [[1.0, 0.5], [2.0, 1.0]])  # 0.7 < 0.75
    with pytest.raises(ValidationError, match=r"early_stop\.mode"):
        EarlyStop("loss", "lowest")


def test_log_metric_writes_the_documented_file_without_the_sdk(tmp_path: Path) -> None:
    # The module alone, with python3 -S and nothing of batchai_sdk importable: what a node without the SDK runs.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "tracking.py").write_text(Path(batchai_sdk.tracking.__file__).read_text())
    code = (
        "import tracking\ntracking.log_metric(1, loss=0.5, val_accuracy=0.9)\ntracking.log_params(lr=0.01)\n"
    )
    env = {"PATH": os.environ["PATH"], "AZ_BATCHAI_STDOUTERR_DIR": str(tmp_path / "logs")}
    subprocess.run([sys.executable, "-S", "-c", code], cwd=alone, env=env, check=True)
    rank1 = {**env, "OMPI_COMM_WORLD_RANK": "1"}
    subprocess.run([sys.executable, "-S", "-c", code], cwd=alone, env=rank1, check=True)  # writes nothing
    lines = (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["step"], record["loss"], record["val_accuracy"]) == (1, 0.5, 0.9) and record["time"] > 0
    assert json.loads((tmp_path / "logs" / "params.json").read_text()) == {"lr": 0.01}
    with pytest.raises(TypeError, match="metric 'loss': expected a number"):
        batchai_sdk.log_metric(1, directory=tmp_path, loss="low")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        batchai_sdk.log_metric(1, directory=tmp_path, loss=float("nan"))


PLAIN = """
    from batchai_sdk import log_metric
    for step in range(1, 4):
        log_metric(step, perplexity=30.0 / step, bleu=step * 0.1, val_bleu=step * 0.09)
"""


def test_plots_tables_cost_and_reruns_follow_what_the_job_has(ws: Workspace, script: Script) -> None:
    pytest.importorskip("matplotlib")
    exp = ws.create_experiment("nlp")
    cluster = ws.create_cluster("c", nodes=2, price_per_hour=1.8)
    path = str(script("plain.py", PLAIN))
    job = exp.create_job("j", cluster=cluster, node_count=2, python_script=path, args=["--size", "small"])
    assert repr(exp.sweep("s", grid={"x": [1, 2, 3]}, cluster=cluster, node_count=2, python_script=path)
                .estimate_cost(0.5)) == "$5.40"  # fmt: skip
    estimate = job.estimate_cost(0.5)  # before submit: 2 nodes × $1.80/h × 0.5 h
    assert estimate == pytest.approx(1.8) and repr(estimate) == "$1.80" and str(estimate) == "$1.80"
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert repr(job.cost).startswith("$") and job.cost is not None and job.cost >= 0

    fig = job.plot_metrics()
    titles = sorted(ax.get_title() for ax in fig.axes if ax.get_visible())
    assert titles == ["bleu — j", "perplexity — j"]  # no empty Accuracy or Loss panel
    bleu = next(ax for ax in fig.axes if ax.get_title().startswith("bleu"))
    assert [line.get_label() for line in bleu.get_lines()] == ["training", "validation"]
    assert bleu.get_xlabel() == "step"
    row = exp.results().iloc[0]
    assert row["size"] == "small" and row["perplexity"] == pytest.approx(10.0) and row["val_bleu"] > 0.26

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same run again: returned quietly
        same = exp.create_job("j", cluster=cluster, node_count=2, python_script=path, args=["--size", "small"],
                              exist_ok=True)  # fmt: skip
    assert same.submit().state is JobState.SUCCEEDED
    with pytest.warns(RerunChangedWarning, match=r"ran with other args: it is returned as it is") as caught:
        exp.create_job("j", cluster=cluster, node_count=2, python_script=path, args=["--size", "large"],
                       exist_ok=True)  # fmt: skip
    assert caught[0].filename == __file__  # the warning points at the caller's line


def _cli_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """A group, workspace, experiment `e` and a 2-node cluster `c` made with the CLI; the -g/-w flags."""
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    g = ["-g", "rg", "-w", "ws"]
    for argv in (
        ["group", "create", "--name", "rg", "--location", "eastus"],
        ["workspace", "create", "-g", "rg", "--workspace", "ws"],
        ["experiment", "create", *g, "--name", "e"],
        ["cluster", "create", *g, "--name", "c", "--target", "2"],
    ):
        assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    return g


def _options(capsys: pytest.CaptureFixture[str], *command: str) -> set[str]:
    assert main([*command, "--help"]) == 0
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", capsys.readouterr().out))


# A DDP script: without the pytorch toolkit its ranks have no RANK/WORLD_SIZE.
DDP = """
    import argparse, os
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); a = p.parse_args()
    log_metric(1, world=int(os.environ["WORLD_SIZE"]), rank_seen=int(os.environ["RANK"]), lr_seen=a.lr)
"""


def test_sweep_create_takes_every_job_create_option_and_runs_a_ddp_grid(
    script: Script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # one definition: whatever `job create` accepts (but its own --config-file/--stream), `sweep create` does
    job_options = _options(capsys, "job", "create") - {"--config-file", "--stream", "--help"}
    assert job_options - _options(capsys, "sweep", "create") == set()
    assert {"--toolkit", "--source-dir", "--hang-timeout", "--max-retries"} <= job_options
    g = _cli_workspace(tmp_path, monkeypatch, capsys)
    proj = script("proj/train.py", DDP).parent
    code = main(["sweep", "create", *g, "-e", "e", "-n", "ddp", "-c", "c", "--source-dir", str(proj),
                 "--python-script", "train.py", "--toolkit", "pytorch", "--nodes", "2",
                 "--param", "lr=0.1,0.2", "-o", "json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["state"], r["world"], r["lr_seen"]) for r in rows] == [
        ("succeeded", 2, 0.1),
        ("succeeded", 2, 0.2),
    ]
    base = [
        "sweep",
        "create",
        *g,
        "-e",
        "e",
        "-n",
        "x",
        "-c",
        "c",
        "--python-script",
        "m.py",
        "--param",
        "a=1",
    ]
    assert main([*base, "--early-stop", "loss:min:soon"]) == 2
    assert "expected METRIC:min or METRIC:max, optionally :GRACE steps" in capsys.readouterr().err
    assert main([*base, "--early-stop-min-trials", "3"]) == 2
    assert "--early-stop-min-trials needs --early-stop" in capsys.readouterr().err


FAILING = """
    import argparse
    p = argparse.ArgumentParser(); p.add_argument("--lr", type=float); a = p.parse_args()
    raise RuntimeError(f"lr {a.lr} diverged")
"""


def test_a_sweep_whose_every_trial_failed_says_why_and_exits_non_zero(
    script: Script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    g = _cli_workspace(tmp_path, monkeypatch, capsys)
    code = main(["sweep", "create", *g, "-e", "e", "-n", "bad", "-c", "c", "--python-script",
                 str(script("f.py", FAILING)), "--param", "lr=0.1,0.2", "-o", "table"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert "sweep bad: every trial failed" in err
    lines = out.splitlines()
    assert lines[0].split() == ["job", "state", "lr", "note"]
    assert "RuntimeError: lr 0.1 diverged" in lines[-2] and "RuntimeError: lr 0.2 diverged" in lines[-1]
    assert main(["sweep", "show", *g, "-e", "e", "-n", "bad", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "RuntimeError: lr 0.2 diverged" in shown[1]["note"]


# Logs `accuracy` at steps 10, 20, 30 (the step key, not the record count); the bad trial logs 10 and 20
# and then waits for a file nobody writes: only an early stop ends it before the test's timeout.
STEPPED = """
    import argparse, os, time
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--quality", type=float); a = p.parse_args()
    last = 20 if a.quality < 2 else 30
    for step in range(10, last + 1, 10):
        log_metric(step, accuracy=a.quality / 10)
    if a.quality < 2:
        deadline = time.time() + 120
        while time.time() < deadline and not os.path.exists("/nonexistent/gate"):
            time.sleep(0.2)
"""


def test_early_stop_counts_the_step_key_with_a_grace_and_notes_when_it_could_not_apply(
    ws: Workspace, script: Script
) -> None:
    exp = ws.create_experiment("tune")
    cluster = ws.create_cluster("c", nodes=3)
    path = str(script("stepped.py", STEPPED))
    sweep = exp.sweep("stop", grid={"quality": [5, 6, 1]}, max_concurrent=3, cluster=cluster,
                      early_stop=EarlyStop("accuracy", "max", grace=20), python_script=path)  # fmt: skip
    rows = {r["job"]: r for r in sweep.run(timeout=100, poll_interval=0.2).to_dict("records")}
    assert rows["stop-002"]["state"] == "terminated"
    assert "stopped early at step 20: accuracy worse than the median" in rows["stop-002"]["note"]
    assert rows["stop-000"]["state"] == rows["stop-001"]["state"] == "succeeded"
    # one trial at a time: no other trial had reached a step when each ran, and each row says so
    alone = exp.sweep("alone", grid={"quality": [5, 6]}, max_concurrent=1, cluster=cluster,
                      early_stop=EarlyStop("accuracy", "max"), python_script=path)  # fmt: skip
    notes = [r["note"] for r in alone.run(timeout=100, poll_interval=0.2).to_dict("records")]
    assert (
        notes
        == ["early stop did not apply: fewer than 2 other trial(s) had reached step 30 (min_trials=2)"] * 2
    )
    assert "early stop did not apply" in alone._repr_html_()
    with pytest.raises(ValidationError, match=r"early_stop\.min_trials"):
        EarlyStop("accuracy", "max", min_trials=0)


QUICK = """
    import argparse, time
    from batchai_sdk import log_metric
    p = argparse.ArgumentParser(); p.add_argument("--x", type=int); a = p.parse_args()
    time.sleep(3)
    log_metric(1, x=a.x)
"""

DRIVE = """
import sys
import time
from batchai_sdk import Workspace
Workspace.local(root=sys.argv[1]).get_experiment("tune").get_sweep("one").run(poll_interval=0.2)
"""


def test_one_driver_at_a_time_and_a_dead_driver_is_taken_over(
    ws: Workspace, script: Script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    exp = ws.create_experiment("tune")
    cluster = ws.create_cluster("c", nodes=1)
    sweep = exp.sweep("one", grid={"x": [1, 2]}, max_concurrent=1, cluster=cluster,
                      python_script=str(script("quick.py", QUICK)))  # fmt: skip
    driver = subprocess.Popen([sys.executable, "-c", DRIVE, str(tmp_path / "ws")])
    try:
        deadline = time.monotonic() + 60
        while "one-000" not in sweep.jobs():  # the first driver has submitted its first trial
            assert time.monotonic() < deadline and driver.poll() is None
            time.sleep(0.1)
        # a second driver is told who drives, from Python and from the CLI (one line, no traceback)
        with pytest.raises(SweepDrivenError, match=rf"is driven by host '.+' pid {driver.pid} \(since"):
            exp.get_sweep("one").run(timeout=5)
        with pytest.raises(
            TimeoutError, match=rf"sweep 'one''s driver \(host .+ pid {driver.pid} .*\) to stop"
        ):
            exp.get_sweep("one").run(timeout=1, poll_interval=0.2, wait_for_driver=True)  # waits, then says
        code = main(["sweep", "show", "--root", str(tmp_path / "ws"), "-e", "tune", "-n", "one", "--run"])
        err = capsys.readouterr().err
        assert code == 1 and f"pid {driver.pid}" in err and "Traceback" not in err, err
    finally:
        driver.kill()  # the driver dies holding the sweep
        driver.wait()
    started = time.monotonic()
    rows = exp.get_sweep("one").run(timeout=60, poll_interval=0.2).to_dict("records")
    assert [r["state"] for r in rows] == ["succeeded", "succeeded"]  # taken over, nothing run twice
    assert time.monotonic() - started < 30  # at once on its own host, not after the 60 s lease
    assert len(exp.get_job("one-000").attempts) == 1


HANGING = """
    import argparse, time
    p = argparse.ArgumentParser(); p.add_argument("--x", type=int); a = p.parse_args()
    print("started", flush=True)
    if a.x == 1:
        time.sleep(600)  # silent: hung
    print("done", flush=True)
"""


def test_a_silent_trial_is_ended_after_the_trial_hang_timeout_and_frees_its_slot(
    ws: Workspace, script: Script
) -> None:
    exp = ws.create_experiment("tune")
    cluster = ws.create_cluster("c", nodes=1)
    sweep = exp.sweep("hang", grid={"x": [1, 2]}, max_concurrent=1, trial_hang_timeout=3, cluster=cluster,
                      python_script=str(script("hanging.py", HANGING)))  # fmt: skip
    rows = sweep.run(timeout=90, poll_interval=0.2).to_dict("records")
    assert [r["state"] for r in rows] == ["failed", "succeeded"]  # the hung one freed its only slot
    assert "possible hang" in rows[0]["note"]
    path = str(script("hanging.py", HANGING))
    assert exp.sweep("d", grid={"x": [1]}, cluster=cluster, python_script=path).trial_hang_timeout == 3600
    with pytest.raises(ValidationError, match="trial_hang_timeout"):
        exp.sweep("bad", grid={"x": [1]}, trial_hang_timeout=-1, cluster=cluster, python_script=path)
