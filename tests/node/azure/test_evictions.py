"""Azure Spot / low-priority eviction notices (node/azure/evictions.py) from a fake Instance Metadata Service
over real HTTP on loopback, and the eviction of real rank processes: terminated, waited for, acknowledged."""

from __future__ import annotations

import http.server
import json
import os
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from _node_procs import Procs
from batchai_sdk.node.azure import evictions

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
