"""Stacks of a job's Python processes on a node (node/job/stacks.py), with real processes: found by the job's
tag, dumped by py-spy or the faulthandler signal within a time budget, and the command line the nodes run."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest

from _node_procs import Procs, as_on_a_node
from batchai_sdk.node.job import stacks


def _tag() -> str:
    return f"test-{uuid.uuid4().hex}"


def test_find_job_python_pids_picks_the_jobs_python_processes_only(procs: Procs) -> None:
    tag = _tag()
    rank0 = procs.python_rank(tag, "faulthandler")
    rank1 = procs.python_rank(tag, "plain")
    procs.python_rank(_tag(), "faulthandler")  # another job's rank
    procs.python_rank(None, "faulthandler")  # not a job process
    procs.start(["sleep", "30"], tag)  # the job's, but not Python (like mpirun or a shell)
    procs.python_rank(tag + "x", "plain")  # a tag that merely starts with ours

    assert stacks.find_job_python_pids(tag) == sorted([rank0.pid, rank1.pid])
    rank1.kill()
    rank1.wait()
    assert stacks.find_job_python_pids(tag) == [rank0.pid]


def test_handles_signal_reads_the_caught_mask(procs: Procs) -> None:
    with_handler = procs.python_rank(None, "faulthandler")
    without = procs.python_rank(None, "plain")
    assert stacks.handles_signal(with_handler.pid, signal.SIGUSR1)
    assert not stacks.handles_signal(without.pid, signal.SIGUSR1)
    assert stacks.handles_signal(without.pid, signal.SIGINT)  # Python's KeyboardInterrupt handler


def test_collect_stacks_without_py_spy_signals_faulthandler(procs: Procs, tmp_path: Path) -> None:
    tag = _tag()
    rank_stderr = tmp_path / "stderr.txt"
    rank = procs.python_rank(tag, "faulthandler", stderr=rank_stderr)
    bare = procs.python_rank(tag, "plain")
    out = tmp_path / "logs" / stacks.stacks_file_name("10.0.0.4")

    written = stacks.collect_stacks(stacks.find_job_python_pids(tag), out, timeout=10, py_spy=None, node="n1")

    assert written == str(out) and out.name == "stacks-10.0.0.4.txt"
    text = out.read_text()
    assert "# method: faulthandler signal SIGUSR1 (py-spy is not installed)" in text
    assert f"=== a process on n1 (pid {rank.pid}):" in text and f"(pid {bare.pid}):" in text
    assert "sent SIGUSR1" in text and "stderr.txt" in text
    assert "does not catch SIGUSR1" in text
    deadline = time.monotonic() + 10
    while "stuck_in_allreduce" not in rank_stderr.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "in stuck_in_allreduce" in rank_stderr.read_text()
    # Both processes are still alive: the one without a handler was not sent the (deadly) signal.
    assert rank.poll() is None and bare.poll() is None
    assert not list(out.parent.glob("*.part"))


def test_collect_stacks_with_py_spy(procs: Procs, tmp_path: Path) -> None:
    py_spy = stacks.find_py_spy()
    if py_spy is None:
        pytest.skip("py-spy is not installed (pip install py-spy)")
    tag = _tag()
    rank_stderr = tmp_path / "stderr.txt"
    rank = procs.python_rank(tag, "plain", stderr=rank_stderr)
    out = tmp_path / "stacks-n1.txt"

    stacks.collect_stacks(stacks.find_job_python_pids(tag), out, timeout=30)

    text = out.read_text()
    assert "# method: py-spy dump" in text
    assert f"(pid {rank.pid}):" in text and "<string>:" in text and "stuck_in_allreduce" in text, text
    assert rank.poll() is None and rank_stderr.read_text() == ""


def test_collect_stacks_falls_back_when_py_spy_fails(procs: Procs, tmp_path: Path) -> None:
    broken = tmp_path / "py-spy"
    broken.write_text("#!/bin/sh\necho 'Permission denied (os error 13)' >&2\nexit 1\n")
    broken.chmod(0o755)
    rank = procs.python_rank(_tag(), "faulthandler")
    out = tmp_path / "stacks-n1.txt"

    stacks.collect_stacks([rank.pid], out, timeout=10, py_spy=str(broken))

    text = out.read_text()
    assert "py-spy dump exited 1: Permission denied" in text
    assert "falling back to the faulthandler signal" in text and "sent SIGUSR1" in text
    assert rank.poll() is None


def test_collect_stacks_respects_its_time_budget(procs: Procs, tmp_path: Path) -> None:
    slow = tmp_path / "py-spy"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    ranks = [procs.python_rank(_tag(), "plain") for _ in range(2)]
    out = tmp_path / "stacks-n1.txt"

    start = time.monotonic()
    stacks.collect_stacks([r.pid for r in ranks], out, timeout=1.5, py_spy=str(slow))

    assert time.monotonic() - start < 6
    text = out.read_text()
    assert "timed out" in text


def test_collect_stacks_with_no_process_says_so(tmp_path: Path) -> None:
    out = stacks.collect_stacks([], tmp_path / "stacks-n1.txt", timeout=1, py_spy=None)
    assert "no Python process of the job was found" in Path(out).read_text()


def test_job_tag_must_be_a_value() -> None:
    with pytest.raises(ValueError):
        stacks.find_job_python_pids("")


def test_stacks_command_line_on_a_node(procs: Procs, tmp_path: Path) -> None:
    tag = _tag()
    rank = procs.python_rank(tag, "faulthandler")
    done = as_on_a_node(tmp_path, "import batchai_node.job.stacks as s; sys.exit(s.main(sys.argv[1:]))",
                         "--tag", tag, "--out", str(tmp_path / "logs"), "--node", "10.0.0.4", "--timeout", "20")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "logs" / "stacks-10.0.0.4.txt"
    assert done.stdout.strip() == str(out)
    assert f"=== a process on 10.0.0.4 (pid {rank.pid}):" in out.read_text()
