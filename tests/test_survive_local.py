"""Retries, attempts and the hang watchdog through the cluster scheduler, with real processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace

pytestmark = pytest.mark.mpi
Script = Callable[[str, str], Path]

FLAKY = (
    'echo "attempt $AZ_BATCHAI_JOB_RESTART_COUNT"; test "$AZ_BATCHAI_JOB_RESTART_COUNT" -ge {ok} || exit 3'
)


def test_a_listed_exit_code_requeues_the_job_and_each_attempt_keeps_its_logs(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("flaky", cluster=cluster, command_line=FLAKY.format(ok=2), max_retries=2,
                         retry_on_exit_codes=[3]).submit()  # fmt: skip
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    attempts = job.attempts
    assert [a["index"] for a in attempts] == [0, 1, 2]
    assert [a["exit_code"] for a in attempts] == [3, 3, 0]
    assert "retry 1 of 2" in attempts[0]["reason"] and attempts[0]["log_dir"] == "attempt-1"
    assert job.tail("stdout.txt") == ["attempt 2"]  # the last attempt's own log
    assert job.tail("attempt-1/stdout.txt") == ["attempt 0"]
    assert job.tail("attempt-2/stdout.txt") == ["attempt 1"]


def test_out_of_retries_fails_with_the_last_reason(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("never", cluster=cluster, command_line=FLAKY.format(ok=9), max_retries=1,
                         retry_on_exit_codes=[3]).submit()  # fmt: skip
    assert job.wait(timeout=60) is JobState.FAILED
    assert "out of retries: max_retries=1, after 2 attempts" in (job.status.failure_reason or "")
    other = exp.create_job("other", cluster=cluster, command_line="exit 4", max_retries=3,
                           retry_on_exit_codes=[3]).submit()  # fmt: skip
    assert other.wait(timeout=60) is JobState.FAILED and len(other.attempts) == 1  # 4 is not listed


def test_a_silent_job_is_ended_by_the_watchdog_with_its_stacks(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    path = script(
        "stuck.py",
        """
        import faulthandler, signal, sys, time
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        print("started", flush=True)
        def wait_forever():
            time.sleep(600)
        wait_forever()
    """,
    )
    job = exp.create_job("stuck", cluster=cluster, python_script=str(path), hang_timeout=3).submit()
    assert job.wait(timeout=60) is JobState.FAILED
    reason = job.status.failure_reason or ""
    assert "(possible hang); stacks in stacks-" in reason, reason
    node = job.status.nodes[0]
    stack_file = job.tail(f"stacks-{node}.txt", 50)
    assert any("stuck.py" in line for line in stack_file), stack_file
    assert any(
        "wait_forever" in line for line in stack_file + job.tail("stderr.txt", 80)
    )  # py-spy or faulthandler
