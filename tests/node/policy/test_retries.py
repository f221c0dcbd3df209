"""Retry decisions, attempt records and attempt log archives (node/policy/retries.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk.node.policy import retries
from batchai_sdk.node.policy.retries import Attempt, EndCause, Outcome, RetryPolicy, decide

T0 = "2026-01-01T00:00:00+00:00"


def _ended(cause: EndCause, index: int = 0) -> Attempt:
    return Attempt(index=index, start=T0, end=T0, cause=cause, nodes=("n1",))


def test_success_and_plain_failures() -> None:
    policy = RetryPolicy(max_retries=3, retry_on_exit_codes=(75,))
    assert decide(policy, EndCause.EXIT, exit_code=0) == retries.Decision(Outcome.SUCCEEDED, None)
    failed = decide(policy, EndCause.EXIT, exit_code=1, detail="rank 1 on n2 exited with 1")
    assert failed == retries.Decision(Outcome.FAILED, "rank 1 on n2 exited with 1")
    assert decide(policy, EndCause.USER_TERMINATE).outcome is Outcome.TERMINATED
    wall = decide(policy, EndCause.WALL_CLOCK, history=[_ended(EndCause.NODE_LOST)])
    assert wall == retries.Decision(Outcome.FAILED, "max_wall_clock_time reached (after 2 attempts)")
    hang = decide(policy, EndCause.HANG, detail="no output for 1800 s (possible hang); stacks in x")
    assert (
        hang.outcome is Outcome.FAILED and hang.reason == "no output for 1800 s (possible hang); stacks in x"
    )
    with pytest.raises(ValueError):
        decide(policy, EndCause.EXIT)


def test_listed_exit_codes_and_lost_nodes_spend_retries() -> None:
    policy = RetryPolicy(max_retries=2, retry_on_exit_codes=(75, 137))
    first = decide(policy, EndCause.EXIT, exit_code=75)
    assert first.requeue
    assert first.reason == "exit code 75; requeued (exit code 75 is in retry_on_exit_codes), retry 1 of 2"
    second = decide(policy, EndCause.NODE_LOST, detail="node 127.0.0.3 stopped answering",
                    history=[_ended(EndCause.EXIT)])  # fmt: skip
    assert second.requeue and second.reason is not None and second.reason.endswith("retry 2 of 2")
    third = decide(policy, EndCause.NODE_LOST, detail="node 127.0.0.3 stopped answering",
                   history=[_ended(EndCause.EXIT), _ended(EndCause.NODE_LOST, 1)])  # fmt: skip
    assert third == retries.Decision(
        Outcome.FAILED, "node 127.0.0.3 stopped answering (out of retries: max_retries=2, after 3 attempts)"
    )
    # Without retries a lost node fails at once with its own reason.
    assert decide(RetryPolicy(), EndCause.NODE_LOST, detail="node n2 lost") == retries.Decision(
        Outcome.FAILED, "node n2 lost"
    )


def test_evictions_requeue_without_spending_retries() -> None:
    policy = RetryPolicy(max_retries=1)
    evicted = decide(policy, EndCause.EVICTED, detail="Preempt E-1 on vm_3")
    assert evicted.requeue and evicted.reason == (
        "Preempt E-1 on vm_3; requeued (evictions do not count against max_retries)"
    )
    history = [_ended(EndCause.EVICTED, i) for i in range(5)]
    assert decide(policy, EndCause.NODE_LOST, history=history).requeue  # the one retry is still there
    history.append(_ended(EndCause.NODE_LOST, 5))
    assert not decide(policy, EndCause.NODE_LOST, history=history).requeue
    many = [_ended(EndCause.EVICTED, i) for i in range(retries.MAX_EVICTION_REQUEUES)]
    stop = decide(RetryPolicy(), EndCause.EVICTED, history=many)
    assert stop.outcome is Outcome.FAILED and stop.reason is not None and "evictions in a row" in stop.reason
    assert decide(RetryPolicy(), EndCause.EVICTED, history=many[1:]).requeue


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"max_retries": -1}, "max_retries"), ({"max_retries": True}, "max_retries"),
     ({"retry_on_exit_codes": (0,)}, "retry_on_exit_codes"), ({"retry_on_exit_codes": (256,)}, "retry_on_exit_codes"),
     ({"retry_on_exit_codes": ("1",)}, "retry_on_exit_codes")],
)  # fmt: skip
def test_policy_validation(kwargs: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        RetryPolicy(**kwargs)


def test_attempt_record_round_trips() -> None:
    attempt = Attempt(index=1, start=T0, end="2026-01-01T00:05:00+00:00", nodes=("n1", "n2"),
                      cause=EndCause.EVICTED, exit_code=143, reason="Preempt E-1", log_dir="attempt-2",
                      extra={"event_id": "E-1"})  # fmt: skip
    data = attempt.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["cause"] == "evicted"
    assert Attempt.from_dict(data) == attempt
    running = Attempt(index=0, start=T0)
    assert Attempt.from_dict(running.to_dict()) == running
    assert retries.restart_environment(2) == {"AZ_BATCHAI_JOB_RESTART_COUNT": "2"}


def test_archive_attempt_logs(tmp_path: Path) -> None:
    out = tmp_path / "stdouterr"
    out.mkdir()
    for name in ("stdout.txt", "stderr.txt", "execution-n1.log", "stacks-n1.txt", "stdout-job_prep-n1.txt"):
        (out / name).write_text(f"attempt 1 {name}\n")
    (out / "link").symlink_to("/etc/passwd")

    moved = retries.archive_attempt_logs(out, 0)

    assert moved == sorted(["stdout.txt", "stderr.txt", "execution-n1.log", "stacks-n1.txt",
                            "stdout-job_prep-n1.txt", "link"])  # fmt: skip
    assert (out / "attempt-1" / "stdout.txt").read_text() == "attempt 1 stdout.txt\n"
    assert (out / "attempt-1" / "link").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == ["attempt-1"]
    (out / "stdout.txt").write_text("attempt 2\n")
    retries.archive_attempt_logs(out, 1)
    assert retries.attempt_dirs(out) == [(0, str(out / "attempt-1")), (1, str(out / "attempt-2"))]
    assert (out / "attempt-2" / "stdout.txt").read_text() == "attempt 2\n"
    with pytest.raises(FileExistsError):
        retries.archive_attempt_logs(out, 1)  # never overwrite an archived attempt
    assert (out / "attempt-2" / "stdout.txt").read_text() == "attempt 2\n"
