"""What counts as progress for the hang watchdog (steps once a job reports them, else output that is not a
framework's stall warning), the steps rule's limit, and the cross-rank verdict's wording, on real files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from batchai_sdk import log_metric
from batchai_sdk.node.policy.progress import ProgressTracker, step_limit
from batchai_sdk.node.policy.verdict import verdict

# Horovod 0.28.1's stall inspector, as it lands in stderr.txt every 60 s while ranks wait on one another
HOROVOD_STALL = (
    "[2026-11-27 10:00:00.000000: W /tmp/pip-install/horovod/common/stall_inspector.cc:107] One or more "
    "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for "
    "remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to "
    "submit different tensors or that only subset of ranks is submitting tensors, which will cause "
    "deadlock. \nMissing ranks:\n1: [grad]\n"
)


def write(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def test_stall_warnings_and_the_sdks_own_lines_are_not_progress_other_output_is(tmp_path: Path) -> None:
    tracker = ProgressTracker()
    write(tmp_path / "stdout.txt", "epoch 1\n")
    assert tracker.observe(tmp_path, 100.0) == 100.0
    write(tmp_path / "stderr.txt", HOROVOD_STALL)
    write(
        tmp_path / "stderr.txt", "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout\n"
    )
    write(tmp_path / "stdout.txt", "[batchai] possibly hung — stuck: rank 1 on vm_1 is in train.py:67\n")
    assert tracker.observe(tmp_path, 160.0) == 100.0  # still the last real output
    write(tmp_path / "stdout.txt", "epoch 2\n")
    assert tracker.observe(tmp_path, 170.0) == 170.0


def test_once_steps_come_only_a_new_step_is_progress_and_the_limit_follows_their_pace(tmp_path: Path) -> None:
    tracker = ProgressTracker()
    for step, at in ((1, 1000.0), (2, 1030.0), (3, 1060.0), (4, 1150.0)):  # 30 s steps, one slow
        log_metric(step, directory=tmp_path, loss=1.0 / step)
        records = (tmp_path / "metrics.jsonl").read_text().splitlines()
        last = json.loads(records[-1])
        last["time"] = at
        (tmp_path / "metrics.jsonl").write_text("\n".join([*records[:-1], json.dumps(last)]) + "\n")
        tracker.observe(tmp_path, at)
    assert tracker.stepping and tracker.step == 4 and tracker.intervals == [30.0, 30.0, 90.0]
    assert tracker.limit(600.0) == 90.0  # 3 × the median interval (30 s)
    write(tmp_path / "stdout.txt", "still loading data\n")
    assert tracker.observe(tmp_path, 1200.0) == 1150.0  # output is not a step
    assert step_limit([1.0, 2.0, 1.0], 600.0) == 60.0  # fast steps: the 60 s floor
    assert step_limit([1.0, 2.0, 1.0], 10.0) == 10.0  # a hang_notice under 60 s lowers the floor (tests)
    assert (
        step_limit([1.0], None) is None and ProgressTracker().limit(600.0) == 600.0
    )  # no steps: output rule


def rank(n: int, node: str, frames: list[dict[str, Any]], stopped: bool = False) -> dict[str, Any]:
    return {
        "rank": n,
        "node": node,
        "stopped": stopped,
        "threads": [{"name": "MainThread", "frames": frames}],
    }


USER_SLEEP = {"func": "<module>", "file": "/w/train.py", "line": 67, "user": True, "code": "time.sleep(30)"}
REDUCE = [
    {"func": "all_reduce", "file": "/v/site-packages/torch/distributed/distributed_c10d.py", "line": 2810},
    {"func": "wrapper", "file": "/v/site-packages/torch/distributed/c10d_logger.py", "line": 81},
    {"func": "<module>", "file": "/w/train.py", "line": 71, "user": True, "code": "dist.all_reduce(t)"},
]


def test_the_verdict_names_the_odd_rank_out_and_where_the_others_wait() -> None:
    ranks = [
        rank(0, "vm_0", REDUCE),
        rank(1, "vm_1", [USER_SLEEP]),
        rank(2, "vm_2", REDUCE),
        rank(3, "vm_3", REDUCE),
    ]
    assert verdict(ranks, 1204) == (
        "stuck at step 1,204: rank 1 on vm_1 is in train.py:67 (time.sleep(30)); "
        "ranks 0, 2, 3 wait in all_reduce at train.py:71"
    )
    ranks[1] = rank(1, "vm_1", [USER_SLEEP], stopped=True)
    assert verdict(ranks, 7).startswith(
        "stuck at step 7: rank 1 on vm_1 is stopped (SIGSTOP or a debugger) at"
    )
    two = [rank(0, "vm_0", REDUCE), rank(1, "vm_1", REDUCE)]
    assert verdict(two) == "stuck: all ranks wait in all_reduce at train.py:71"
