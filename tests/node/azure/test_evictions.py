"""Node-side survival code: stacks of real processes, hang detection, IMDS eviction notices over real HTTP,
retry decisions and attempt log archives."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk.node.azure import evictions
from batchai_sdk.node.job import stacks
from batchai_sdk.node.policy import retries, watchdog
from batchai_sdk.node.policy.progress import ProgressTracker
from batchai_sdk.node.policy.retries import Attempt, EndCause, Outcome, RetryPolicy, decide

# ----------------------------------------------------------------------------------------------- stacks

HUNG_RANK = textwrap.dedent(
    """
    import faulthandler, signal, sys, time
    if sys.argv[1] == "faulthandler":
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    def stuck_in_allreduce():
        while True:
            time.sleep(0.05)
    print("ready", flush=True)
    stuck_in_allreduce()
    """
)


@dataclass
class Procs:
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, argv: list[str], tag: str | None, stderr: Path | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != stacks.JOB_TAG_VARIABLE}
        if tag is not None:
            env[stacks.JOB_TAG_VARIABLE] = tag
        err = stderr.open("wb") if stderr else subprocess.DEVNULL
        # SIGINT back to its default: a shell's background job inherits it ignored, and Python then installs
        # no KeyboardInterrupt handler, which the caught-mask test reads
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.started.append(proc)
        return proc

    def python_rank(self, tag: str | None, mode: str, stderr: Path | None = None) -> subprocess.Popen[bytes]:
        proc = self.start([sys.executable, "-c", HUNG_RANK, mode], tag, stderr)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # faulthandler is registered by now
        return proc


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    for proc in p.started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


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


# --------------------------------------------------------------------------------------------- watchdog


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


# -------------------------------------------------------------------------------------------- evictions

VM = "batchaivmss_3"


def _event(
    event_type: str = "Preempt", resources: tuple[str, ...] = (VM,), **overrides: Any
) -> dict[str, Any]:
    event = {
        "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": list(resources),
        "EventStatus": "Scheduled",
        "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }
    event.update(overrides)
    return event


class FakeImds:
    """The metadata endpoints a VM sees, on 127.0.0.1: Scheduled Events (GET and POST) and compute/name."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = [{"DocumentIncarnation": 0, "Events": []}]
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.fail_next = 0
        self.post_times: list[float] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self) -> bytes | None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fake.requests.append((self.command, self.path, dict(self.headers), body))
                if self.headers.get("Metadata") != "true":  # as the real service does
                    self._answer(400, b'{"error": "Bad request. Required metadata header not specified"}')
                    return None
                if fake.fail_next:
                    fake.fail_next -= 1
                    self._answer(503, b"{}")
                    return None
                return body

            def do_GET(self) -> None:
                if self._record() is None:
                    return
                if self.path == "/metadata/scheduledevents?api-version=2020-07-01":
                    document = fake.documents[0] if len(fake.documents) == 1 else fake.documents.pop(0)
                    self._answer(200, json.dumps(document).encode())
                elif self.path == "/metadata/instance/compute/name?api-version=2021-02-01&format=text":
                    self._answer(200, VM.encode(), "text/plain")
                else:
                    self._answer(404, b"{}")

            def do_POST(self) -> None:
                if self._record() is None:
                    return
                fake.post_times.append(time.time())
                self._answer(200 if self.path.startswith("/metadata/scheduledevents?") else 404, b"")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def imds(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeImds]:
    fake = FakeImds()
    monkeypatch.setenv(evictions.IMDS_URL_VARIABLE, fake.url)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # must be ignored: IMDS is never proxied
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    yield fake
    fake.close()


def test_imds_base_url_never_defaults_to_a_test_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(evictions.IMDS_URL_VARIABLE, raising=False)
    assert evictions.imds_base_url() == "http://169.254.169.254"
    monkeypatch.setenv(evictions.IMDS_URL_VARIABLE, "http://127.0.0.1:1234/")
    assert evictions.imds_base_url() == "http://127.0.0.1:1234"
    assert evictions.imds_base_url("http://127.0.0.1:99") == "http://127.0.0.1:99"
    with pytest.raises(evictions.ImdsError, match="http://"):
        evictions.imds_base_url("file:///etc/passwd")


def test_poll_finds_a_preempt_event_for_this_vm(imds: FakeImds) -> None:
    imds.documents = [{"DocumentIncarnation": 3, "Events": [
        _event("Reboot", EventId="R-1"),  # not an eviction
        _event("Preempt", ("batchaivmss_1",), EventId="P-OTHER"),  # another VM's
        _event("Preempt", ("batchaivmss_1", VM.upper()), EventId="P-OURS"),
    ]}]  # fmt: skip

    name = evictions.get_vm_name()
    [notice] = evictions.poll(name)

    assert name == VM
    assert notice == evictions.EvictionNotice(
        event_id="P-OURS",
        event_type="Preempt",
        not_before=datetime(2016, 9, 19, 18, 29, 47, tzinfo=timezone.utc),
        resources=("batchaivmss_1", VM.upper()),
        status="Scheduled",
        description="",
        source="Platform",
        document_incarnation=3,
    )
    assert notice.seconds_left(datetime(2016, 9, 19, 18, 29, 7, tzinfo=timezone.utc)) == 40.0
    assert notice.to_dict()["not_before"] == "2016-09-19T18:29:47+00:00"
    for method, path, headers, _ in imds.requests:
        assert method == "GET" and headers["Metadata"] == "true", path


def test_terminate_counts_other_events_do_not(imds: FakeImds) -> None:
    imds.documents = [
        {"DocumentIncarnation": 1, "Events": [_event("Terminate", NotBefore="", EventStatus="Started")]}
    ]
    [notice] = evictions.poll(VM)
    assert notice.event_type == "Terminate"
    assert notice.not_before is None and notice.seconds_left(datetime.now(timezone.utc)) is None
    for kind in ("Reboot", "Redeploy", "Freeze"):
        imds.documents = [{"DocumentIncarnation": 1, "Events": [_event(kind)]}]
        assert evictions.poll(VM) == []
    imds.documents = [{"DocumentIncarnation": 0, "Events": []}]
    assert evictions.poll(VM) == []
    document = {
        "Events": [_event(EventId="A"), _event("Reboot", EventId="B"), _event("Terminate", EventId="C")]
    }
    assert [n.event_id for n in evictions.find_notices(document, VM)] == ["A", "C"]
    assert evictions.find_notice(document, "othervm") is None


def test_acknowledge_posts_the_start_request(imds: FakeImds) -> None:
    evictions.acknowledge("C7061BAC-AFDC-4513-B24B-AA5F13A16123")
    method, path, headers, body = imds.requests[-1]
    assert (method, path) == ("POST", "/metadata/scheduledevents?api-version=2020-07-01")
    assert headers["Metadata"] == "true" and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"StartRequests": [{"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123"}]}


def test_errors_are_imds_errors(imds: FakeImds, tmp_path: Path) -> None:
    imds.fail_next = 1
    with pytest.raises(evictions.ImdsError, match="HTTP 503"):
        evictions.get_scheduled_events()
    imds.documents = [["not", "a", "document"]]  # type: ignore[list-item]
    with pytest.raises(evictions.ImdsError, match="not a Scheduled Events document"):
        evictions.get_scheduled_events()
    imds.close()
    with pytest.raises(evictions.ImdsError):
        evictions.get_scheduled_events(timeout=2)


def test_watch_reports_each_event_once_and_survives_errors(imds: FakeImds) -> None:
    empty = {"DocumentIncarnation": 1, "Events": []}
    preempt = {"DocumentIncarnation": 2, "Events": [_event(EventId="E-1")]}
    imds.documents = [empty, empty, preempt, preempt, preempt, {"DocumentIncarnation": 3, "Events": [
        _event(EventId="E-1"), _event("Terminate", EventId="E-2")]}]  # fmt: skip
    imds.fail_next = 2  # the service is not answering at first (the VM name lookup fails twice)
    notices: list[evictions.EvictionNotice] = []
    errors: list[evictions.ImdsError] = []
    stop = threading.Event()
    got_two = threading.Event()

    def on_notice(notice: evictions.EvictionNotice) -> None:
        notices.append(notice)
        evictions.acknowledge(notice.event_id)
        if len(notices) == 2:
            got_two.set()

    thread = threading.Thread(
        target=evictions.watch, args=(on_notice,),
        kwargs={"interval": 0.02, "stop_event": stop, "on_error": errors.append}, daemon=True,
    )  # fmt: skip
    thread.start()
    assert got_two.wait(10)
    time.sleep(0.2)  # more polls of the same document report nothing new
    stop.set()
    thread.join(5)

    assert not thread.is_alive()
    # E-1 is in the last document too, but was already reported; E-2 is a Terminate for the same VM.
    assert [n.event_id for n in notices] == ["E-1", "E-2"]
    assert len(errors) == 2 and all("503" in str(e) for e in errors)
    posts = [json.loads(body) for method, _, _, body in imds.requests if method == "POST"]
    assert posts == [{"StartRequests": [{"EventId": "E-1"}]}, {"StartRequests": [{"EventId": "E-2"}]}]


def test_watch_stops_promptly(imds: FakeImds) -> None:
    stop = threading.Event()
    thread = threading.Thread(
        target=evictions.watch,
        args=(lambda n: None,),
        kwargs={"interval": 60, "stop_event": stop},
        daemon=True,
    )
    thread.start()
    time.sleep(0.2)
    start = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - start < 2


CHECKPOINTING_RANK = textwrap.dedent(
    """
    import signal, sys, time
    def on_sigterm(signum, frame):
        time.sleep(0.3)  # finish the step, save the checkpoint
        open(sys.argv[1], "w").write(str(time.time()))
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_sigterm)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
    """
)
DEAF_RANK = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_evict_terminates_the_ranks_waits_for_the_checkpoint_then_acknowledges(
    imds: FakeImds, procs: Procs, tmp_path: Path
) -> None:
    saved = tmp_path / "checkpoint-saved"
    good = procs.start([sys.executable, "-c", CHECKPOINTING_RANK, str(saved)], None)
    deaf = procs.start([sys.executable, "-c", DEAF_RANK], None)
    for proc in (good, deaf):
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    now = datetime.now(timezone.utc)
    notice = evictions.EvictionNotice("E-9", "Preempt", now + timedelta(seconds=7), (VM,))

    start = time.monotonic()
    still_running = evictions.evict(notice, [good.pid, deaf.pid], margin=5.0, now=now)
    elapsed = time.monotonic() - start

    assert still_running == [deaf.pid]  # the one that ignores SIGTERM was waited for until NotBefore - 5 s
    assert 1.8 < elapsed < 5, elapsed
    assert good.wait(5) == 143 and saved.is_file()
    assert deaf.poll() is None
    method, _, _, body = imds.requests[-1]
    assert (method, json.loads(body)) == ("POST", {"StartRequests": [{"EventId": "E-9"}]})
    assert imds.post_times[-1] >= float(saved.read_text())  # acknowledged only after the checkpoint


def test_evict_with_every_rank_done_acknowledges_at_once(
    imds: FakeImds, procs: Procs, tmp_path: Path
) -> None:
    saved = tmp_path / "saved"
    rank = procs.start([sys.executable, "-c", CHECKPOINTING_RANK, str(saved)], None)
    assert rank.stdout is not None and rank.stdout.readline() == b"ready\n"
    notice = evictions.EvictionNotice("E-10", "Terminate", None, (VM,), status="Started")
    start = time.monotonic()
    # The rank is this test's child: it stays a zombie until waited for, and a zombie counts as ended.
    assert evictions.evict(notice, [rank.pid, 999_999_999]) == []
    assert time.monotonic() - start < evictions.DEFAULT_GRACE / 2
    assert imds.post_times and saved.is_file()


def test_pid_alive_treats_zombies_as_ended(procs: Procs) -> None:
    proc = procs.start([sys.executable, "-c", "pass"], None)
    deadline = time.monotonic() + 10
    while evictions.pid_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not evictions.pid_alive(proc.pid)
    assert Path(f"/proc/{proc.pid}").exists()  # still there as a zombie: not reaped yet
    assert evictions.pid_alive(os.getpid())


def _as_on_a_node(tmp_path: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the node package copied alone as ``batchai_node`` (batchai_sdk unimportable)."""
    package = tmp_path / "share" / "batchai_node"
    if not package.exists():
        shutil.copytree(
            Path(stacks.__file__).parent.parent, package, ignore=shutil.ignore_patterns("__pycache__")
        )
    prelude = f"import sys; sys.path.insert(0, {str(package.parent)!r}); sys.modules['batchai_sdk'] = None; "
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code, *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_stacks_command_line_on_a_node(procs: Procs, tmp_path: Path) -> None:
    tag = _tag()
    rank = procs.python_rank(tag, "faulthandler")
    done = _as_on_a_node(tmp_path, "import batchai_node.job.stacks as s; sys.exit(s.main(sys.argv[1:]))",
                         "--tag", tag, "--out", str(tmp_path / "logs"), "--node", "10.0.0.4", "--timeout", "20")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = tmp_path / "logs" / "stacks-10.0.0.4.txt"
    assert done.stdout.strip() == str(out)
    assert f"=== a process on 10.0.0.4 (pid {rank.pid}):" in out.read_text()


def test_node_modules_import_only_the_standard_library(tmp_path: Path) -> None:
    # every module of the node package, subfolders included, imports as ``batchai_node`` with python -S
    root = Path(stacks.__file__).parent.parent
    modules = sorted(
        ".".join(("batchai_node", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for p in root.rglob("*.py")
        if p.name != "__main__.py"
    )
    assert len(modules) > 25 and "batchai_node.scheduler.daemon" in modules
    done = _as_on_a_node(
        tmp_path, "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]", *modules
    )
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------------------------- retries

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
