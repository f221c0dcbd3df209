"""The hang verdict's readers, on the texts the real tools write: a faulthandler dump (as a rank writes it on
SIGUSR1, with a launcher's prefix on some lines), PyTorch flight-recorder entries (the installed torch's
``_dump_fr_trace_json`` shape) and Horovod's stall warning (its stall inspector's lines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from batchai_sdk.node.job.stacks import parse_faulthandler
from batchai_sdk.node.policy import flight, stall
from batchai_sdk.node.policy.verdict import verdict

SCRIPT = """\
import faulthandler, signal, sys, threading, time
faulthandler.register(signal.SIGUSR1, all_threads=True)
threading.Thread(target=lambda: time.sleep(60), name="loader", daemon=True).start()
def wait():
    print("ready", flush=True)
    time.sleep(60)
wait()
"""


def test_a_real_faulthandler_dump_is_read_into_threads_the_script_first(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as f:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=f)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while "line 7 in <module>" not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    dump = err.read_text()
    text = "rank 0: prefetching\n" + dump + "rank 0: prefetching\n" + dump  # a later dump is another hang's
    threads = parse_faulthandler(text)
    main = threads[0]
    assert main["name"] == "MainThread", threads
    assert [(f["func"], f["line"], f["user"]) for f in main["frames"]] == [
        ("wait", 6, True),
        ("<module>", 7, True),
    ]
    assert main["frames"][0]["code"] == "time.sleep(60)"
    assert len(threads) == 2 and not any(f["user"] for f in threads[1]["frames"][1:]), (
        threads
    )  # the second dump
    rec = {"rank": 1, "node": "vm_1", "threads": threads}
    other = {"rank": 0, "node": "vm_0", "threads": [{"name": "MainThread", "frames": [
        {"func": "all_reduce", "file": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 1, "user": False},
        {"func": "<module>", "file": str(script), "line": 9, "user": True, "code": "dist.all_reduce(t)"}]}]}  # fmt: skip
    assert verdict([other, rec], 5) == (
        "stuck at step 5: rank 1 on vm_1 is in train.py:6 (time.sleep(60)); rank 0 on vm_0 waits in all_reduce at "
        "train.py:9"
    )


def _entries(*ops: str) -> list[dict[str, object]]:
    return [
        {"collective_seq_id": i, "profiling_name": f"gloo:{op}", "is_p2p": False}
        for i, op in enumerate(ops, 1)
    ]


def test_the_flight_recorder_names_the_rank_behind_or_in_a_collective_no_rank_ran_before() -> None:
    behind = {0: _entries("all_reduce", "all_reduce", "all_reduce"), 1: _entries("all_reduce", "all_reduce")}
    assert flight.summary(behind) == (
        "flight recorder: rank 0 at collective #3 all_reduce, rank 1 at collective #2 all_reduce",
        [1],
    )
    swapped = {0: _entries("all_reduce", "all_reduce"), 1: _entries("all_reduce", "barrier")}
    assert flight.summary(swapped)[1] == [1]
    assert flight.summary({0: _entries("all_reduce"), 1: _entries("all_reduce")})[1] == []  # all in step
    same = {"rank": 0, "node": "vm_0", "threads": [{"name": "MainThread", "frames": [
        {"func": "barrier", "file": "/x/site-packages/t.py", "line": 1, "user": False},
        {"func": "<module>", "file": "/j/train.py", "line": 21, "user": True}]}]}  # fmt: skip
    other = {**same, "rank": 1, "node": "vm_1"}
    other["threads"] = [{"name": "MainThread", "frames": [
        {"func": "all_reduce", "file": "/x/site-packages/t.py", "line": 1, "user": False},
        {"func": "<module>", "file": "/j/train.py", "line": 23, "user": True}]}]  # fmt: skip
    # two ranks in two collectives: the stacks alone name nobody, the recorder's blame puts rank 0 first
    assert verdict([same, other]) == (
        "stuck: rank 0 on vm_0 waits in barrier at train.py:21; rank 1 on vm_1 waits in all_reduce at train.py:23"
    )
    assert verdict([same, other], blame=[1]).startswith("stuck: rank 1 on vm_1 waits in all_reduce")


WARNING = """\
[2026-11-27 19:19:40.123456: W /tmp/pip-req-build/horovod/common/stall_inspector.cc:107] One or more tensors were \
submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more \
than 2 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset \
of ranks is submitting tensors, which will cause deadlock.
Missing ranks:
0: [HorovodBroadcast]
1: [HorovodAllreduce]
2: [HorovodBroadcast]
rank 0: loading
"""


def test_horovods_stall_warning_names_the_rank_missing_from_the_tensor_most_ranks_submitted(
    tmp_path: Path,
) -> None:
    assert stall.summary(str(tmp_path)) == ("", [])  # no stderr.txt yet
    (tmp_path / "stderr.txt").write_text("older output\n" + WARNING)
    assert stall.summary(str(tmp_path)) == (
        "Horovod: HorovodBroadcast waits for ranks 0, 2; HorovodAllreduce waits for rank 1",
        [1],
    )
    two = WARNING.replace("2: [HorovodBroadcast]\n", "")
    (tmp_path / "stderr.txt").write_text(two)
    assert stall.summary(str(tmp_path))[1] == []  # one rank each: Horovod alone cannot tell
