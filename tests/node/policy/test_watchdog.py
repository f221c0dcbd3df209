"""Hang detection from a job's log files (node/policy/watchdog.py): the newest output, the verdict and the
scheduler's progress tracker on the caller's clock."""

from __future__ import annotations

import os
from pathlib import Path

from batchai_sdk.node.policy import watchdog
from batchai_sdk.node.policy.progress import ProgressTracker


def _write(path: Path, text: str, mtime: float) -> Path:
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def test_last_output_time_takes_the_newest_non_empty_log(tmp_path: Path) -> None:
    _write(tmp_path / "stdout.txt", "epoch 1\n", 1000.0)
    _write(tmp_path / "stderr.txt", "warning\n", 1200.0)
    _write(tmp_path / "execution-n1.log", "", 5000.0)  # created, never written
    _write(tmp_path / "execution-n2.log", "rank 1 started\n", 1100.0)
    _write(tmp_path / "metrics.jsonl", "{}\n", 9000.0)  # not a log file the watchdog looks at
    (tmp_path / "attempt-1").mkdir()
    _write(tmp_path / "attempt-1" / "stdout.txt", "old\n", 8000.0)

    files = watchdog.job_log_files(tmp_path)
    assert [p.name for p in files] == ["execution-n1.log", "execution-n2.log", "stderr.txt", "stdout.txt"]
    assert watchdog.last_output_time(files) == 1200.0
    assert watchdog.last_output_time([tmp_path / "missing.txt"]) is None
    assert watchdog.last_output_time([tmp_path / "execution-n1.log"]) is None


def test_hang_verdict() -> None:
    # Output 100 s ago with a 60 s timeout: hung; the reason names the stack files.
    reason = watchdog.hang_verdict(
        1000.0, 900.0, 1100.4, 60, stack_files=["a/stacks-n1.txt", "a/stacks-n2.txt"]
    )
    assert reason == "no output for 100 s (possible hang); stacks in a/stacks-n1.txt, a/stacks-n2.txt"
    assert watchdog.hang_verdict(1000.0, 900.0, 1059.9, 60) is None
    assert watchdog.hang_verdict(1000.0, 900.0, 1060.0, 60) is not None
    # No output yet: counted from the start. Output older than this attempt's start: from the start too.
    assert watchdog.hang_verdict(None, 900.0, 959.0, 60) is None
    assert watchdog.hang_verdict(None, 900.0, 961.0, 60) == (
        "no output for 61 s (possible hang); stacks in none (no stack files could be written)"
    )
    assert watchdog.hang_verdict(100.0, 900.0, 959.0, 60) is None
    # No watchdog.
    assert watchdog.hang_verdict(0.0, 0.0, 1e9, None) is None
    assert watchdog.hang_verdict(0.0, 0.0, 1e9, 0) is None


def test_output_tracker_uses_the_callers_clock(tmp_path: Path) -> None:
    log = _write(tmp_path / "stdout.txt", "", 5.0)  # the share's clock is far behind ours
    tracker = ProgressTracker()  # the scheduler's: output counts until the job reports steps
    assert tracker.observe(tmp_path, now=100.0) is None  # empty: no output yet
    _write(log, "epoch 1\n", 5.0)  # same mtime (a coarse clock), new size
    assert tracker.observe(tmp_path, now=110.0) == 110.0
    assert tracker.observe(tmp_path, now=500.0) == 110.0  # unchanged since
    assert watchdog.hang_verdict(tracker.last_progress, 90.0, 500.0, 300) is not None
    os.utime(log, (6.0, 6.0))  # same size, new mtime (a line rewritten in place)
    assert tracker.observe(tmp_path, now=520.0) == 520.0
    assert watchdog.hang_verdict(tracker.last_progress, 90.0, 530.0, 300) is None
