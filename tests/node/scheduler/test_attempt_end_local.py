"""Retries, attempts and the hang watchdog through the cluster scheduler, with real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk.node.job.stacks import find_py_spy

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
    if find_py_spy() is not None:  # py-spy beside the node's Python (the dev venv has it): in the file
        assert any("wait_forever" in line for line in stack_file), stack_file
    else:  # faulthandler on SIGUSR1: the stacks are in the rank's stderr, and the file says so
        assert any("stderr" in line for line in stack_file), stack_file
        assert any("wait_forever" in line for line in job.tail("stderr.txt", 80))


class FakeImds:
    """Scheduled Events for one VM on 127.0.0.1: a Preempt notice until it is acknowledged."""

    def __init__(self, vm: str) -> None:
        import http.server
        import json as _json
        import threading
        from datetime import datetime, timedelta, timezone

        self.acknowledged: list[str] = []
        self.armed = threading.Event()  # the notice is served once the test arms it
        not_before = (datetime.now(timezone.utc) + timedelta(seconds=20)).strftime(
            "%a, %d %b %Y %H:%M:%S GMT"
        )
        imds = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def reply(self, body: bytes, kind: str = "application/json") -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.startswith("/metadata/instance/compute/name"):
                    return self.reply(vm.encode(), "text/plain")
                events = [] if imds.acknowledged or not imds.armed.is_set() else [{
                    "EventId": "E-1", "EventType": "Preempt", "ResourceType": "VirtualMachine",
                    "Resources": [vm], "EventStatus": "Scheduled", "NotBefore": not_before,
                    "Description": "", "EventSource": "Platform", "DurationInSeconds": -1,
                }]  # fmt: skip
                return self.reply(_json.dumps({"DocumentIncarnation": 1, "Events": events}).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                imds.acknowledged += [r["EventId"] for r in _json.loads(body)["StartRequests"]]
                self.reply(b"{}")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


EVICTABLE = """
    import os, signal, sys, time
    def checkpoint(signum, frame):
        print("checkpointed on SIGTERM", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, checkpoint)
    attempt = os.environ["AZ_BATCHAI_JOB_RESTART_COUNT"]
    print("attempt", attempt, flush=True)
    if attempt == "0":
        time.sleep(120)
"""


def test_a_spot_eviction_requeues_the_job_without_spending_a_retry(
    ws: Workspace, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    imds = FakeImds("vm-under-test")
    monkeypatch.setenv("BATCHAI_IMDS_URL", imds.url)  # the scheduler, and so every rank, inherits it
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("spot", vm_size="Standard_NC6", nodes=1, vm_priority="lowpriority")
    job = exp.create_job("evicted", cluster=cluster, python_script=str(script("ev.py", EVICTABLE))).submit()
    deadline = time.monotonic() + 30
    while not job.files() or job.tail() != ["attempt 0"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    imds.armed.set()  # Azure announces the eviction while the job runs
    try:
        assert job.wait(timeout=90) is JobState.SUCCEEDED, job.status.failure_reason
    finally:
        imds.server.shutdown()
    assert imds.acknowledged == ["E-1"]
    first, second = job.attempts
    assert first["cause"] == "evicted" and "evictions do not count against max_retries" in first["reason"]
    assert first["extra"]["evictions"][0]["event_id"] == "E-1"
    assert second["cause"] == "exit" and second["exit_code"] == 0
    assert job.tail("attempt-1/stdout.txt") == ["attempt 0", "checkpointed on SIGTERM"]
    assert job.tail("stdout.txt") == ["attempt 1"]


def test_simulate_eviction_tries_the_resume_path(ws: Workspace, script: Script) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=2)
    job = exp.create_job("resumable", cluster=cluster, node_count=2,
                         python_script=str(script("ev.py", EVICTABLE))).submit()  # fmt: skip
    deadline = time.monotonic() + 30
    while not job.files() or job.tail() != ["attempt 0", "attempt 0"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    node = job.status.nodes[1]
    assert cluster.simulate_eviction(node, grace_seconds=10) == "e/resumable"
    assert job.wait(timeout=90) is JobState.SUCCEEDED, job.status.failure_reason
    first = job.attempts[0]
    assert first["cause"] == "evicted" and first["extra"]["evictions"][0]["node"] == node
    assert job.tail("stdout.txt") == ["attempt 1", "attempt 1"]
    assert "checkpointed on SIGTERM" in job.tail("attempt-1/stdout.txt", 10)
    with pytest.raises(Exception, match="runs no job, so there is no node to evict"):
        cluster.simulate_eviction()  # nothing runs now
