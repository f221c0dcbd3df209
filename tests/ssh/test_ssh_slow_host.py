"""A host that is alive but slow is never taken for gone (remote/liveness.py): a request it takes longer
than the liveness probe to answer (its SFTP server stalled, a command that runs long and says nothing)
completes, since the host's sshd answers the keepalive the client sends meanwhile. The head-node-gone side,
a host that answers nothing, is tests/ssh/machines/test_ssh_dead_host.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk.remote.liveness import ANSWER_WITHIN, PROBE_AFTER

pytestmark = pytest.mark.ssh

STALL = PROBE_AFTER + ANSWER_WITHIN + 3  # longer than a silent host is given: only its answer keeps it


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            children = (task / "children").read_text().split()
            found += map(int, children)
            todo += map(int, children)
    return found


def _sftp_servers(sshd_pid: int) -> list[int]:
    """The SFTP servers of the sessions of one sshd (``internal-sftp``: a child of the session's process,
    titled ``sshd: USER@internal-sftp``; the session process answering keepalives is its parent)."""
    out = []
    for pid in _descendants(sshd_pid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if title.startswith(b"sshd: ") and title.endswith(b"@internal-sftp"):
            out.append(pid)
    return out


def test_a_share_read_the_host_is_slow_to_answer_completes(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    node = NODE_ADDRESSES[0]
    sshd = ssh_nodes.nodes[node].process
    assert sshd is not None
    before = set(_sftp_servers(sshd.pid))  # other tests' sessions may still be open
    ws = ssh_nodes.workspace("slowhost", tmp_path, [node])  # one host: nowhere to fail over to
    data = "x" * (1 << 20)
    try:
        assert ws.backend.io_timeout == 30  # type: ignore[attr-defined]  # the default a user has
        ws.share.write_text("big.txt", data)  # the SFTP session is open
        servers = [pid for pid in _sftp_servers(sshd.pid) if pid not in before]
        assert len(servers) == 1, servers
        os.kill(servers[0], signal.SIGSTOP)  # its SFTP server stalls; sshd itself runs on
        resumed = threading.Timer(STALL, os.kill, (servers[0], signal.SIGCONT))
        resumed.start()
        try:
            t = time.monotonic()
            assert ws.share.read_text("big.txt") == data
            took = time.monotonic() - t
        finally:
            resumed.cancel()
            os.kill(servers[0], signal.SIGCONT)
        print(f"\na read stalled {STALL:g} s on a live host: answered after {took:.1f} s, not dropped")
        assert took >= STALL - 0.5, f"the read answered after {took:.1f} s: was the SFTP server stopped?"
        assert servers[0] in _sftp_servers(sshd.pid)  # the same session served it: never dropped
    finally:
        ws.close()


def test_a_long_quiet_command_on_a_live_node_runs_to_its_end(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    node = NODE_ADDRESSES[0]
    ws = ssh_nodes.workspace("quietcmd", tmp_path, [node])
    try:
        runner = ws.backend._runner(node)  # type: ignore[attr-defined]  # the backend's own runner
        t = time.monotonic()
        result = runner.run(f"sleep {STALL:g}; echo done", timeout=60)
        took = time.monotonic() - t
        assert (result.exit_code, result.stdout) == (0, "done\n"), result.describe()
        assert took >= STALL
    finally:
        ws.close()
