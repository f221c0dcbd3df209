"""What a notebook user sees: metrics records, the training-curve figure, HTML reprs, progress output."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import JobState, NotFoundError, Workspace
from batchai_sdk._progress import enabled

pytestmark = pytest.mark.mpi

METRICS_SCRIPT = """
    import json, os, sys
    out = sys.argv[sys.argv.index("--dir") + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        for epoch in (1, 2, 3):
            f.write(json.dumps({"epoch": epoch, "loss": 1.0 / epoch, "accuracy": 0.3 * epoch,
                                "val_loss": 1.2 / epoch, "val_accuracy": 0.25 * epoch,
                                "images_per_sec": 100.0, "seconds": 1.5}) + "\\n")
        f.write('{"epoch": 4, "loss"')  # a line still being written
    print("epoch 3 done")
"""


@pytest.fixture
def finished_job(ws: Workspace, script: Callable[[str, str], Path]):  # type: ignore[no-untyped-def]
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job(
        "m",
        cluster=cluster,
        python_script=str(script("m.py", METRICS_SCRIPT)),
        args=["--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/run1"],
    )
    job.submit()
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    return job


def test_metrics_are_read_next_to_the_dir_argument(finished_job) -> None:  # type: ignore[no-untyped-def]
    records = finished_job.metrics()
    rows = records.to_dict("records") if hasattr(records, "to_dict") else records
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[2]["val_accuracy"] == pytest.approx(0.75)


def test_plot_metrics_draws_loss_and_accuracy(finished_job) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    fig = finished_job.plot_metrics()
    panels = {ax.get_title().split(" — ")[0]: ax for ax in fig.axes if ax.get_visible()}
    assert list(panels) == ["loss", "accuracy", "images_per_sec", "seconds"]  # every metric it logged
    loss_ax, acc_ax = panels["loss"], panels["accuracy"]
    assert [line.get_label() for line in loss_ax.get_lines()] == ["training", "validation"]
    assert list(acc_ax.get_lines()[1].get_ydata()) == pytest.approx([0.25, 0.5, 0.75])
    assert list(loss_ax.get_lines()[0].get_xdata()) == [1, 2, 3]
    fig.savefig(Path(finished_job.workspace.backend.root) / "curves.png")  # renders without a display
    for ax in (loss_ax, acc_ax):  # the epoch axis reads 1, 2, 3: no 1.25 or 2.5 ticks
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(t == round(t) for t in ticks), ticks
        assert {1, 2, 3} <= {round(t) for t in ticks}


def test_metrics_missing_are_empty_and_the_plot_says_where_it_looked(
    ws: Workspace, script: Callable[[str, str], Path]
) -> None:
    exp = ws.create_experiment("e")
    ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("none", cluster="c", python_script=str(script("n.py", "print(1)"))).submit()
    job.wait(timeout=60)
    assert len(job.metrics()) == 0  # nothing logged: an empty table, not an error
    with pytest.raises(NotFoundError, match=r"metrics\.jsonl"):
        job.metrics("elsewhere/metrics.jsonl")  # a file named by the caller must exist
    pytest.importorskip("matplotlib")
    with pytest.raises(NotFoundError, match=r"stdouterr/metrics\.jsonl"):
        job.plot_metrics()


def test_html_reprs_show_state_counts_and_last_lines(finished_job) -> None:  # type: ignore[no-untyped-def]
    ws = finished_job.workspace
    html = finished_job._repr_html_()
    assert "succeeded" in html and "epoch 3 done" in html and "exit code" in html
    cluster_html = ws.get_cluster("c")._repr_html_()
    assert "steady" in cluster_html and "idle 1" in cluster_html
    # its job ended: idle for a few seconds, not "-" (busy)
    assert re.search(r"idle for</th><td[^>]*>\d+s<", cluster_html), cluster_html
    ws_html = ws._repr_html_()
    assert "Workspace local" in ws_html
    assert re.search(r"experiments</th><td[^>]*>e<", ws_html)
    assert re.search(r"clusters</th><td[^>]*>c<", ws_html)


def test_progress_is_off_unless_a_terminal_or_asked(
    ws: Workspace, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert enabled(False) is False and enabled(True) is True
    monkeypatch.setenv("BATCHAI_PROGRESS", "0")
    assert enabled(None) is False
    src = tmp_path / "big.bin"
    src.write_bytes(b"x" * 3_000_000)
    ws.share.upload(src, "data/big.bin")
    assert capsys.readouterr().err == ""
    ws.share.download("data/big.bin", tmp_path / "back.bin", show_progress=True)
    assert (tmp_path / "back.bin").stat().st_size == 3_000_000


def test_download_finds_files_in_the_dir_argument(finished_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # DESIGN's snippet: --dir $AZ_BATCHAI_JOB_MOUNT_ROOT/cifar, then job.download("saved_models/...")
    assert finished_job.dir_argument() == "cifar/run1"
    dest = finished_job.download("metrics.jsonl", tmp_path / "m.jsonl")
    assert dest.read_text().count('"epoch"') == 4
    assert finished_job.file_roots()[-1] == "cifar/run1"
