"""The node agent's socket is an API too (node/agent/serve.py), tried on a real agent process on this
machine: malformed, hostile and stale requests are refused with nothing done and the agent goes on
serving; at the end of its standard input it stops listening at once and exits only once the command it
started has ended; a command whose agent was lost is watched until it ends, a zombie counting as
ended. (Jobs through agents on sshd nodes: tests/ssh/test_ssh_node_agent.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import batchai_sdk.node
from _procs import wait_for
from batchai_sdk.node.agent.client import watch_command

NODE_MAIN = os.path.abspath(Path(batchai_sdk.node.__file__).parent / "__main__.py")
TAG = "ab" * 16


class Agent:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc = subprocess.Popen(
            [sys.executable, "-S", NODE_MAIN, "agent", "0123456789abcdef"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "HOME": str(home)},
        )
        assert self.proc.stdout is not None
        word, _, self.path = self.proc.stdout.readline().decode().strip().partition(" ")
        assert word == "ready" and self.path.startswith(str(home)), (word, self.path)

    def ask(self, line: bytes) -> list[dict[str, Any]]:
        """Send one request line; every answer until the agent closes the connection."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(self.path)
            s.sendall(line + b"\n")
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        greeting, *answers = [json.loads(x) for x in data.splitlines()]
        assert "agent" in greeting
        return answers

    def request(self, **doc: Any) -> list[dict[str, Any]]:
        return self.ask(json.dumps({"node_main": NODE_MAIN, **doc}).encode())


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path)
    yield a
    if a.proc.poll() is None:
        assert a.proc.stdin is not None
        a.proc.stdin.close()
        a.proc.wait(timeout=30)


def test_bad_requests_are_refused_with_nothing_done_and_the_agent_serves_on(
    agent: Agent, tmp_path: Path
) -> None:
    planted = tmp_path / "planted"
    bad: list[tuple[bytes, str]] = [
        (b"not json", "invalid"),
        (b"[1, 2]", "invalid"),
        (b"[" * 100_000, "invalid"),
        (json.dumps({"op": "reap", "node_main": NODE_MAIN, "tag": "x; rm -rf /"}).encode(), "invalid"),
        (b'{"op": "reap", "node_main": "%s", "tag": NaN}' % NODE_MAIN.encode(), "invalid"),
        (json.dumps({"op": "reap", "node_main": "/another/__main__.py", "tag": TAG}).encode(), "stale"),
        (json.dumps({"op": "format", "node_main": NODE_MAIN}).encode(), "invalid"),
    ]
    for line, code in bad:
        (answer,) = agent.ask(line)
        assert answer["ok"] is False and answer["error"] == code, (line[:60], answer)
    refused = [
        {"op": "exec", "command": f"touch {planted}", "env": {}},  # no job's tag
        {"op": "exec", "command": f"touch {planted}", "env": {"BATCHAI_JOB_TAG": TAG, "LD_PRELOAD": "x"}},
        {"op": "rank", "config": "/etc/passwd", "env": {"BATCHAI_JOB_TAG": TAG}},
        {
            "op": "rank",
            "config": str(tmp_path / "launch.json"),
            "env": {"BATCHAI_JOB_TAG": TAG, "PATH": "/x"},
        },
        {"op": "prep", "config": "launch.json", "node": "n", "env": {"BATCHAI_JOB_TAG": TAG}},
    ]
    for doc in refused:
        (answer,) = agent.request(**doc)
        assert answer["ok"] is False and answer["error"] == "invalid", (doc, answer)
    assert not planted.exists()
    assert agent.request(op="reap", tag=TAG) == [{"ok": True, "left": 0}]
    assert agent.proc.poll() is None


def test_at_the_end_of_its_stdin_it_stops_listening_and_exits_once_its_command_ended(
    agent: Agent, tmp_path: Path
) -> None:
    gate, ran = tmp_path / "gate", tmp_path / "ran"
    command = f"echo $BATCHAI_JOB_TAG > {ran}; while [ ! -e {gate} ]; do sleep 0.05; done"
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(agent.path)
    conn.sendall(
        json.dumps(
            {"op": "exec", "node_main": NODE_MAIN, "command": command, "env": {"BATCHAI_JOB_TAG": TAG}}
        ).encode()
        + b"\n"
    )
    reader = conn.makefile("rb")
    assert "agent" in json.loads(reader.readline())
    assert json.loads(reader.readline())["ok"] is True
    wait_for(ran.exists, 30, "the command to run")
    assert ran.read_text().strip() == TAG  # it carries the job's tag
    assert agent.proc.stdin is not None
    agent.proc.stdin.close()  # the scheduler's end of the channel
    wait_for(lambda: not os.path.exists(agent.path), 30, "the agent to stop listening")
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as late:
        late.connect(agent.path)
    assert agent.proc.poll() is None  # its command still runs: it stays to report that command's end
    gate.touch()
    assert json.loads(reader.readline()) == {"exit": 0}
    assert agent.proc.wait(timeout=30) == 0
    conn.close()


def test_a_lost_agents_command_counts_as_ended_once_it_is_a_zombie() -> None:
    """A stopped agent cannot reap the shim it started: the watcher over SSH (client.watch_command) must
    not wait on the zombie for ever."""
    child = subprocess.Popen(["sleep", "60"])
    watcher = subprocess.Popen(["sh", "-c", watch_command(child.pid, TAG)])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            watcher.wait(timeout=0.5)  # it runs while the command does
        os.kill(child.pid, signal.SIGKILL)  # not reaped: a zombie, as under a stopped agent
        wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z", 10, "Z")
        assert watcher.wait(timeout=30) == 0
    finally:
        watcher.kill()
        child.kill()
        child.wait()
        watcher.wait()
