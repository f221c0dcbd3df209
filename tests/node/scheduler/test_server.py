"""The scheduler's socket is an API: hostile, malformed, silent, slow and huge requests against a real
scheduler daemon. Each is refused (or dropped) with nothing written, and the loop goes on serving others;
a poison row in ``sched.db`` is quarantined instead of wedging every restart."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import batchai_sdk.node
from _configs import local_cluster_config
from _procs import wait_for

NODE_MAIN = str(Path(batchai_sdk.node.__file__).parent / "__main__.py")
ANSWER_S = 5.0  # a reply must come well before the 10 s a silent client used to stall the loop


class Daemon:
    """A real scheduler process on a state folder, with a cluster of ``nodes`` local nodes."""

    def __init__(self, root: Path, nodes: int = 1) -> None:
        self.root = root
        self.share = root / "share"
        self.state = root / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.cfg: dict[str, Any] = local_cluster_config(self.share, nodes, idle_exit_seconds=600)
        Path(self.cfg["cluster_dir"]).mkdir(parents=True, exist_ok=True)
        (self.state / "cluster.json").write_text(json.dumps(self.cfg))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.state / "scheduler.log", "ab")  # noqa: SIM115 - the daemon's
        with log:
            self.proc = subprocess.Popen(
                [sys.executable, "-S", NODE_MAIN, "scheduler", str(self.state)], stdout=log, stderr=log
            )
        wait_for(lambda: self.ping() is not None, 30, "the scheduler's socket")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def connect(self, timeout: float = ANSWER_S) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        conn.connect(str(self.state / "sched.sock"))
        return conn

    def send_raw(self, data: bytes, timeout: float = ANSWER_S) -> dict[str, Any] | None:
        """The reply to ``data`` (a newline is added), or None when the scheduler closed without one."""
        try:
            with self.connect(timeout) as conn:
                try:
                    conn.sendall(data + b"\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # refused before it was all sent: the reply may still be there to read
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError):
            return None
        return json.loads(reply) if reply.strip() else None

    def request(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        return self.send_raw(json.dumps(doc).encode())

    def ping(self) -> dict[str, Any] | None:
        try:
            return self.request({"op": "ping"})
        except OSError:
            return None

    def rows(self) -> list[tuple[Any, ...]]:
        with sqlite3.connect(f"file:{self.state / 'sched.db'}?mode=ro", uri=True) as db:
            return list(db.execute("SELECT id, key, state FROM jobs ORDER BY id"))

    def stage(self, name: str, command: str) -> None:
        """A job's folder on the share as a client's submit leaves it (the custom toolkit, one node)."""
        base = self.share / ".batchai" / "experiments" / "e" / "jobs" / name
        for sub in ("run", "wd", "stdouterr"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        launch = {
            "job": f"e/{name}", "toolkit": "custom", "python": sys.executable, "command_line": command,
            "env": {"AZ_BATCHAI_JOB_TEMP": str(self.root / "tmp" / name)}, "expand_env": [],
            "stdouterr_dir": str(base / "stdouterr"), "wd": str(base / "wd"), "run_dir": str(base / "run"),
            "hostfile": str(base / "run" / "hostfile"), "ranks_per_node": [1], "head": "n0",
            "ssh_command": None, "job_preparation": None, "share_root": str(self.share), "node_count": 1,
        }  # fmt: skip
        (base / "run" / "launch.json").write_text(json.dumps(launch))
        (base / "status.json").write_text(json.dumps({"state": "queued"}))

    def status(self, name: str) -> dict[str, Any]:
        path = self.share / ".batchai" / "experiments" / "e" / "jobs" / name / "status.json"
        data: dict[str, Any] = json.loads(path.read_text())
        return data


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path)
    d.start()
    yield d
    d.stop()


def submit(name: str, **fields: Any) -> dict[str, Any]:
    return {"op": "submit", "experiment": "e", "name": name, "node_count": 1, **fields}


HOSTILE = {
    "a JSON list": b"[1, 2, 3]",
    "200k-deep nesting": b"[" * 200_000 + b"]" * 200_000,
    "200k-deep nesting in a field": b'{"op": "submit", "secrets": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "node_count Infinity": b'{"op": "submit", "experiment": "e", "name": "inf", "node_count": Infinity}',
    "node_count NaN": b'{"op": "submit", "experiment": "e", "name": "nan", "node_count": NaN}',
    "node_count 1e400": b'{"op": "submit", "experiment": "e", "name": "big", "node_count": 1e400}',
    "cluster 5": json.dumps({"op": "ping", "cluster": 5}).encode(),
    "wall clock 'soon'": json.dumps(submit("soon", max_wall_clock_seconds="soon")).encode(),
    "node_count true": json.dumps(submit("bool", node_count=True)).encode(),
    "retry codes of strings": json.dumps(submit("codes", retry_on_exit_codes=["1"])).encode(),
    "secrets not strings": json.dumps(submit("sec", secrets={"A": 1})).encode(),
    "priority 'urgent'": json.dumps(submit("urgent", scheduling_priority="urgent")).encode(),
    "priority a list": json.dumps(submit("plist", scheduling_priority=["high"])).encode(),
    "a node address that is an ssh option": b"",  # filled in below (needs the daemon's configuration)
    "not UTF-8": b'{"op": "\xff\xfe"}',
    "not JSON": b"hello",
    "an unknown op": b'{"op": "drop_tables"}',
}


def test_hostile_requests_are_refused_change_nothing_and_the_loop_goes_on(daemon: Daemon) -> None:
    cluster_json = (daemon.state / "cluster.json").read_bytes()
    hostile = dict(HOSTILE)
    cfg = json.loads(cluster_json)
    cfg["nodes"][0]["address"] = "-oProxyCommand=touch /tmp/owned"
    hostile["a node address that is an ssh option"] = json.dumps({"op": "ping", "cluster": cfg}).encode()
    for what, data in hostile.items():
        reply = daemon.send_raw(data)
        assert reply is not None, what
        assert reply["ok"] is False and reply["error"] == "invalid", (what, reply)
        assert daemon.alive(), what
        assert daemon.rows() == [], what
        assert (daemon.state / "cluster.json").read_bytes() == cluster_json, what
    assert "soon" in daemon.send_raw(hostile["wall clock 'soon'"])["message"]  # type: ignore[index]
    assert "max_wall_clock_seconds" in daemon.send_raw(hostile["wall clock 'soon'"])["message"]  # type: ignore[index]
    # the loop still works, and a restart finds nothing to choke on
    daemon.stage("ok", "echo fine")
    assert daemon.request(submit("ok"))["ok"]  # type: ignore[index]
    wait_for(lambda: daemon.status("ok")["state"] == "succeeded", 60, "the job after the hostile requests")
    daemon.stop()
    daemon.start()
    assert daemon.alive() and [r[1:] for r in daemon.rows()] == [("e/ok", "succeeded")]


def test_ctl_refuses_a_hostile_cluster_before_writing_it(daemon: Daemon) -> None:
    cluster_json = (daemon.state / "cluster.json").read_bytes()
    res = subprocess.run(
        [sys.executable, "-S", NODE_MAIN, "ctl", str(daemon.state)],
        input=json.dumps({"op": "ping", "cluster": {"cluster": "c", "nodes": 5}}).encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    reply = json.loads(res.stdout)
    assert reply["ok"] is False and reply["error"] == "invalid" and "cluster.nodes" in reply["message"]
    assert (daemon.state / "cluster.json").read_bytes() == cluster_json
    assert daemon.ping() is not None


def test_silent_slow_and_huge_clients_do_not_stall_the_others(daemon: Daemon) -> None:
    silent = daemon.connect(timeout=60)  # connects and never sends
    slow = daemon.connect(timeout=60)
    stop = threading.Event()

    def dribble() -> None:  # one byte at a time, never a whole line
        while not stop.is_set():
            try:
                slow.send(b" ")
            except OSError:
                return
            time.sleep(0.1)

    huge_reply: list[bytes] = []

    def flood() -> None:  # 64 MB without a newline
        with daemon.connect(timeout=60) as conn:
            try:
                for _ in range(64):
                    conn.sendall(b"x" * (1 << 20))
            except OSError:
                pass
            try:
                huge_reply.append(conn.recv(65536))
            except OSError:
                huge_reply.append(b"")

    threads = [threading.Thread(target=dribble), threading.Thread(target=flood)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):  # answered while all three are connected
            t0 = time.monotonic()
            assert daemon.ping() is not None
            assert time.monotonic() - t0 < ANSWER_S
        threads[1].join(timeout=60)
        assert not threads[1].is_alive()  # the flood was cut off, not read to its end
        if huge_reply and huge_reply[0]:
            assert json.loads(huge_reply[0])["error"] == "invalid"
        daemon.stage("meanwhile", "true")
        assert daemon.request(submit("meanwhile"))["ok"]  # type: ignore[index]
        wait_for(lambda: daemon.status("meanwhile")["state"] == "succeeded", 60, "a job beside the stallers")
    finally:
        stop.set()
        threads[0].join(timeout=10)
        silent.close()
        slow.close()
    assert daemon.alive()


def test_a_poison_row_is_quarantined_instead_of_wedging_restarts(tmp_path: Path) -> None:
    d = Daemon(tmp_path)
    d.start()
    d.stage("poison", "true")
    d.stop()
    with sqlite3.connect(d.state / "sched.db") as db:  # what an older scheduler let in
        db.execute(
            "INSERT INTO jobs (key, experiment, name, request_id, node_count, wall, state)"
            " VALUES ('e/poison', 'e', 'poison', 'r0', 1, 'soon', 'queued')"
        )
    d.start()
    try:
        assert d.alive()
        wait_for(lambda: d.status("poison")["state"] == "failed", 30, "the poison row's job to fail")
        assert "quarantined" in d.status("poison")["failure_reason"]
        with sqlite3.connect(f"file:{d.state / 'sched.db'}?mode=ro", uri=True) as db:
            (row, reason), *_ = db.execute("SELECT row, reason FROM quarantine")
        assert "'soon'" in reason and json.loads(row)["wall"] == "soon"
        d.stage("after", "true")
        assert d.request(submit("after"))["ok"]  # type: ignore[index]
        wait_for(lambda: d.status("after")["state"] == "succeeded", 60, "a job after the poison row")
        d.stop()
        d.start()  # and again: nothing left to choke on
        assert d.alive()
    finally:
        d.stop()


# -- fuzzed ------------------------------------------------------------------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["op", "experiment", "name", "node_count", "max_wall_clock_seconds", "cluster", "secrets", "request_id",
     "retry_on_exit_codes", "max_retries", "hang_timeout", "max_cost", "price", "created", "no_start", "scheduling_priority"]
)  # fmt: skip
REQUESTS = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(FIELDS, JSON, max_size=8).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries(
        {"op": st.sampled_from(["submit", "terminate", "ping", "nodes"])},
        optional={f: JSON for f in ("experiment", "name", "node_count", "max_wall_clock_seconds", "cluster")},
    ).map(lambda d: json.dumps(d).encode()),
)


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("fuzz"), nodes=0)  # no node: nothing a fuzzed submit queues can start
    d.start()
    yield d
    d.stop()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=REQUESTS)
def test_a_fuzzed_socket_never_kills_the_scheduler(fuzz_daemon: Daemon, data: bytes) -> None:
    reply = fuzz_daemon.send_raw(data)
    assert fuzz_daemon.alive()
    if reply is not None:
        assert isinstance(reply.get("ok"), bool)
    assert fuzz_daemon.ping() is not None
    assert os.path.exists(fuzz_daemon.state / "sched.db")


def test_a_request_id_names_one_request_a_replay_with_other_content_is_refused(daemon: Daemon) -> None:
    daemon.stage("first", "true")
    daemon.stage("second", "true")
    first = daemon.request(submit("first", request_id="r" * 32))
    assert first is not None and first["ok"]
    again = daemon.request(submit("first", request_id="r" * 32))  # the same request, resent: idempotent
    assert again is not None and again["ok"] and again["id"] == first["id"] and again["repeated"]
    other = daemon.request(submit("second", request_id="r" * 32))  # other content under a used id
    assert other is not None and not other["ok"], other
    assert other["error"] == "request_id_reused" and "second" not in other.get("key", "")
    assert "request_id" in other["message"]
    assert [key for _, key, _ in daemon.rows()] == ["e/first"]
    wait_for(lambda: daemon.status("first")["state"] == "succeeded", 60, "the first job")
    assert daemon.request(submit("second", request_id="s" * 32))["ok"]  # type: ignore[index]
    wait_for(lambda: daemon.status("second")["state"] == "succeeded", 60, "the second job, sent anew")


CHECK_FREE = (
    "python -c \"import sys, pathlib; s = pathlib.Path('/proc/' + sys.argv[1] + '/stat');"
    " sys.exit(3 if s.exists() and s.read_text().rsplit(')', 1)[1].split()[0] != 'Z' else 0)\" "
)


@pytest.mark.parametrize("corrupt", ["wall = 'soon'", "nodes = 'not json'"])
def test_quarantining_a_running_jobs_row_ends_its_processes_before_its_node_is_reused(
    tmp_path: Path, corrupt: str
) -> None:
    d = Daemon(tmp_path)  # one node
    pid_file = tmp_path / "rank.pid"
    d.start()
    try:
        d.stage("long", f"echo $$ > {pid_file}; exec sleep 300")
        assert d.request(submit("long"))["ok"]  # type: ignore[index]
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 30, "the rank")
        rank = pid_file.read_text().strip()
        assert d.proc is not None
        d.proc.kill()  # the scheduler dies; its job runs on
        d.proc.wait(timeout=30)
        with sqlite3.connect(d.state / "sched.db") as db:  # a value no code path expects, as a bug left it
            db.execute(f"UPDATE jobs SET {corrupt} WHERE key = 'e/long'")
        d.start()
        d.stage("next", CHECK_FREE + rank)  # fails (exit 3) if it shares the node with the rank
        assert d.request(submit("next"))["ok"]  # type: ignore[index]
        wait_for(lambda: d.status("next")["state"] in ("succeeded", "failed"), 60, "the next job")
        assert d.status("next")["state"] == "succeeded", d.status("next")
        assert d.status("long")["state"] == "failed" and "quarantined" in d.status("long")["failure_reason"]
    finally:
        d.stop()
