"""SSHRunner and SFTPShare against real sshd nodes: commands, timeouts, the fan-out, retries, jumps."""

from __future__ import annotations

import builtins
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sshd import DEAD_ADDRESS, NODE_ADDRESSES, SSHNode, SSHNodes, keygen

from _procs import pid_alive
from batchai_sdk.backends.ssh.share import SFTPShare
from batchai_sdk.exceptions import BatchAIError, BatchAITimeoutError, NodeError, NotFoundError, ShareError
from batchai_sdk.remote.fanout import fan_out
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHError, SSHRunner

pytestmark = pytest.mark.ssh

MakeRunner = Callable[..., SSHRunner]


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_run_returns_output_and_exit_code(make_runner: MakeRunner) -> None:
    runner = make_runner()
    result = runner.run("echo out; echo err >&2; exit 3")
    assert (result.node, result.exit_code, result.stdout, result.stderr) == ("127.0.0.2", 3, "out\n", "err\n")
    assert not result.ok
    assert runner.run("cat; printf ' %s' \"$0\"", stdin="from stdin").stdout == "from stdin /bin/sh"


def test_connection_opens_lazily_and_is_reused(make_runner: MakeRunner) -> None:
    runner = make_runner(DEAD_ADDRESS)  # constructing connects to nothing
    assert not runner.connected
    live = make_runner()
    with live:
        first = live.run("echo $PPID").stdout
        assert live.connected
        transport = live.transport()
        live.run("true")
        assert live.transport() is transport
        assert first.strip().isdigit()
    assert not live.connected  # the context manager closed it
    assert live.run("echo again").stdout == "again\n"  # and it reconnects on use


def test_timeout_kills_the_command_and_raises(make_runner: MakeRunner, tmp_path: Path) -> None:
    runner = make_runner()
    pid_file = tmp_path / "pid"
    start = time.monotonic()
    with pytest.raises(BatchAITimeoutError) as err:
        runner.run(f"echo $$ > {pid_file}; sleep 30 & wait", timeout=1)
    assert time.monotonic() - start < 5
    assert isinstance(err.value, builtins.TimeoutError) and isinstance(err.value, BatchAIError)
    assert "127.0.0.2" in str(err.value)
    pid = int(pid_file.read_text())
    assert wait_for(lambda: not pid_alive(pid), 5), "the timed-out command still runs on the node"
    assert runner.run("echo still usable").ok


def test_commands_on_all_nodes_report_each_failure(make_runner: MakeRunner) -> None:
    runners = {a: make_runner(a) for a in [*NODE_ADDRESSES[:3], DEAD_ADDRESS]}
    probe = fan_out(runners, lambda r: r.run("hostname >/dev/null && echo ok", timeout=20))
    with pytest.raises(NodeError) as err:
        probe.raise_on_failure("probe")
    assert list(err.value.failures) == [DEAD_ADDRESS]
    assert "connection refused" in err.value.failures[DEAD_ADDRESS]
    assert err.value.succeeded == NODE_ADDRESSES[:3]
    exits = {a: i for i, a in enumerate(runners)}
    ran = fan_out(runners, lambda r: r.run(f"echo {r.node}; exit {exits[r.node]}"))
    assert {a: (r.exit_code, r.stdout) for a, r in ran.succeeded.items()} == {
        "127.0.0.2": (0, "127.0.0.2\n"),
        "127.0.0.3": (1, "127.0.0.3\n"),
        "127.0.0.4": (2, "127.0.0.4\n"),
    }
    assert list(ran.failed) == [DEAD_ADDRESS]
    reasons = ran.reasons()  # a command that ran and failed, and a node never reached, named alike
    assert (reasons["127.0.0.3"], reasons["127.0.0.4"]) == (
        "exit code 1: 127.0.0.3",
        "exit code 2: 127.0.0.4",
    )
    assert list(reasons) == ["127.0.0.3", "127.0.0.4", DEAD_ADDRESS]


def test_unreachable_node_fails_fast_after_a_few_retries(make_runner: MakeRunner) -> None:
    runner = make_runner(DEAD_ADDRESS, retries=3, retry_wait=0.1)
    start = time.monotonic()
    with pytest.raises(SSHError) as err:
        runner.run("true")
    assert time.monotonic() - start < 3
    assert err.value.code == "unreachable" and err.value.host.startswith(DEAD_ADDRESS)


def test_connect_retries_reach_a_node_that_comes_up_late(
    ssh_nodes: SSHNodes, make_runner: MakeRunner, tmp_path: Path
) -> None:
    late = SSHNode("127.0.0.7", ssh_nodes.port, tmp_path, ssh_nodes.authorized_keys)
    keygen(late.host_key)
    store = HostKeyStore(tmp_path / "known_hosts")
    (tmp_path / "known_hosts").write_text(late.host_key_line())
    no_retry = make_runner("127.0.0.7", host_keys=store, retries=1)
    with pytest.raises(SSHError):  # before the node is up, however slowly this test runs
        no_retry.run("true")
    starter = threading.Timer(0.6, late.start)
    starter.start()
    try:
        patient = make_runner("127.0.0.7", host_keys=store, retries=6, retry_wait=0.2)
        assert patient.run("echo up").stdout == "up\n"
    finally:
        starter.join()
        late.stop()


def test_wrong_key_is_an_auth_error_without_key_material(make_runner: MakeRunner, tmp_path: Path) -> None:
    other = keygen(tmp_path / "other_key")
    runner = make_runner(key_file=other)
    with pytest.raises(SSHError) as err:
        runner.run("true")
    assert err.value.code == "auth"
    private = other.read_text()
    body = "".join(private.splitlines()[1:-1])
    assert body[:40] not in str(err.value) and "PRIVATE KEY" not in str(err.value)


def test_jump_host_carries_the_connection(make_runner: MakeRunner) -> None:
    jump = make_runner(NODE_ADDRESSES[0])
    inner = make_runner(NODE_ADDRESSES[1], jump=jump)
    assert inner.run("echo via jump").stdout == "via jump\n"
    assert jump.connected  # the inner connection rides on the jump host's
    jump.close()
    # the inner session's socket was a channel of the jump connection: it broke with it
    assert wait_for(lambda: not inner.connected, 5)
    assert inner.run("echo reconnected").stdout == "reconnected\n"

    dead_jump = make_runner(DEAD_ADDRESS, retries=1)
    stranded = make_runner(NODE_ADDRESSES[1], jump=dead_jump, retries=1)
    with pytest.raises(SSHError) as err:
        stranded.run("true")
    assert DEAD_ADDRESS in str(err.value)


# -- the share over SFTP ------------------------------------------------------------------------------


@pytest.fixture
def sftp_share(make_runner: MakeRunner, tmp_path: Path) -> SFTPShare:
    root = tmp_path / "share"
    root.mkdir()
    return SFTPShare(make_runner(), str(root))


def test_share_writes_land_under_share_path(sftp_share: SFTPShare) -> None:
    sftp_share.write_text("a/b/c.txt", "hello")
    assert (Path(sftp_share.root) / "a" / "b" / "c.txt").read_text() == "hello"
    assert sftp_share.name == "share"


def test_share_ranged_reads(sftp_share: SFTPShare) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    sftp_share.write_bytes("blob.bin", data)
    assert sftp_share.read_bytes("blob.bin") == data
    assert sftp_share.read_bytes("blob.bin", 1000, 10) == data[1000:1010]
    assert sftp_share.read_bytes("blob.bin", len(data) - 3, 100) == data[-3:]
    assert sftp_share.read_bytes("blob.bin", len(data) + 5, 10) == b""
    assert sftp_share.read_bytes("blob.bin", 7) == data[7:]
    with pytest.raises(NotFoundError):
        sftp_share.read_bytes("missing.bin")
    sftp_share.mkdir("adir")
    with pytest.raises(NotFoundError):
        sftp_share.read_bytes("adir")


def test_share_write_replaces_atomically(sftp_share: SFTPShare) -> None:
    sftp_share.write_json("rec/status.json", {"state": "queued"})
    target = Path(sftp_share.root) / "rec" / "status.json"
    inode = target.stat().st_ino
    sftp_share.write_json("rec/status.json", {"state": "running"})
    assert sftp_share.read_json("rec/status.json") == {"state": "running"}
    assert target.stat().st_ino != inode  # a new file renamed over the old one, never rewritten in place
    assert sorted(p.name for p in target.parent.iterdir()) == ["status.json"]  # no temp files left
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    sftp_share.restrict("rec/status.json")
    assert oct(target.stat().st_mode & 0o777) == oct(0o600)
    with pytest.raises(NotFoundError):
        sftp_share.restrict("rec/missing.json")


def test_share_listing_stat_and_delete(sftp_share: SFTPShare) -> None:
    sftp_share.write_bytes("d/z.txt", b"zz")
    sftp_share.write_bytes("d/a.txt", b"a")
    sftp_share.mkdir("d/sub/deeper")
    sftp_share.mkdir("d/sub/deeper")  # idempotent
    listing = sftp_share.list("d")
    assert [(e.name, e.type, e.size) for e in listing] == [
        ("a.txt", "file", 1),
        ("sub", "directory", None),
        ("z.txt", "file", 2),
    ]
    assert all(e.modified is not None for e in listing)
    info = sftp_share.stat("d/z.txt")
    assert info is not None and info.name == "z.txt" and info.size == 2
    assert sftp_share.stat("d/nope") is None
    with pytest.raises(NotFoundError):
        sftp_share.list("nope")
    with pytest.raises(NotFoundError):
        sftp_share.list("d/a.txt")
    sftp_share.delete("d/a.txt")
    sftp_share.delete("d/a.txt")  # already gone: no error
    sftp_share.delete("d", recursive=True)
    sftp_share.delete("d", recursive=True)
    assert sftp_share.stat("d") is None


def test_share_upload_and_download_trees_with_progress(sftp_share: SFTPShare, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "big.bin").write_bytes(b"x" * (3 * 1024 * 1024 + 17))
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    sent: list[int] = []
    sftp_share.upload(src, "up", progress=sent.append)
    assert sum(sent) == 3 * 1024 * 1024 + 17 + len("#!/bin/sh\necho hi\n")
    assert len(sent) >= 4  # chunked
    assert (Path(sftp_share.root) / "up" / "run.sh").stat().st_mode & 0o777 == 0o755
    got: list[int] = []
    out = sftp_share.download("up", tmp_path / "back", progress=got.append)
    assert (out / "pkg" / "big.bin").read_bytes() == (src / "pkg" / "big.bin").read_bytes()
    assert sum(got) == sum(sent)


def test_share_errors_are_share_errors(make_runner: MakeRunner, tmp_path: Path) -> None:
    share = SFTPShare(make_runner(DEAD_ADDRESS, retries=1), str(tmp_path))
    with pytest.raises(ShareError) as err:
        share.exists("x")
    assert DEAD_ADDRESS in str(err.value)


def test_share_reconnects_after_the_connection_broke(sftp_share: SFTPShare) -> None:
    sftp_share.write_text("x.txt", "1")
    sftp_share.runner.close()
    assert sftp_share.read_text("x.txt") == "1"


class Blackhole:
    """A TCP relay to a node's sshd that can stop passing bytes, as a host that lost power does: the
    connection stays open, nothing answers."""

    def __init__(self, target: tuple[str, int]) -> None:
        import socket

        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.silent = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        import socket

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, src: object, dst: object) -> None:
        import socket

        assert isinstance(src, socket.socket) and isinstance(dst, socket.socket)
        try:
            while data := src.recv(65536):
                if not self.silent.is_set():
                    dst.sendall(data)
        except OSError:
            pass


def test_a_share_whose_host_stops_answering_is_read_through_the_next_host(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    """Every host sees the share at the same path: the head node's loss must not take its records along."""
    node, other = NODE_ADDRESSES[0], NODE_ADDRESSES[1]
    relay = Blackhole((node, ssh_nodes.port))
    line = ssh_nodes.known_hosts_text([node]).replace(
        f"[{node}]:{ssh_nodes.port}", f"[127.0.0.1]:{relay.port}"
    )
    (tmp_path / "known_hosts").write_text(line + ssh_nodes.known_hosts_text([other]))
    options: dict[str, Any] = {
        "user": ssh_nodes.user, "key_file": ssh_nodes.key_file, "connect_timeout": 3.0, "retries": 1,
        "io_timeout": 3.0, "host_keys": HostKeyStore(tmp_path / "known_hosts"),
    }  # fmt: skip
    head = SSHRunner("127.0.0.1", port=relay.port, **options)
    second = SSHRunner(other, port=ssh_nodes.port, **options)
    root = tmp_path / "share"
    root.mkdir()
    share = SFTPShare(head, str(root), others=lambda: [head, second])
    try:
        share.write_text("status.json", '{"state": "running"}')
        relay.silent.set()  # the head node goes dark
        t = time.monotonic()
        assert share.read_json_or_none("status.json") == {"state": "running"}  # through the second host
        assert time.monotonic() - t < 20
        share.write_text("status.json", '{"state": "succeeded"}')  # and from then on, at once
        assert json.loads((root / "status.json").read_text()) == {"state": "succeeded"}
    finally:
        head.close()
        second.close()
        relay.listener.close()


def test_a_share_whose_host_stops_answering_fails_in_bounded_time_naming_the_host(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    node = NODE_ADDRESSES[0]
    relay = Blackhole((node, ssh_nodes.port))
    line = ssh_nodes.known_hosts_text([node]).replace(
        f"[{node}]:{ssh_nodes.port}", f"[127.0.0.1]:{relay.port}"
    )
    (tmp_path / "known_hosts").write_text(line)
    runner = SSHRunner(
        "127.0.0.1", port=relay.port, user=ssh_nodes.user, key_file=ssh_nodes.key_file,
        host_keys=HostKeyStore(tmp_path / "known_hosts"), connect_timeout=3.0, retries=1, io_timeout=3.0,
    )  # fmt: skip
    root = tmp_path / "share"
    root.mkdir()
    share = SFTPShare(runner, str(root))
    try:
        share.write_text("status.json", "{}")
        relay.silent.set()  # the host goes dark
        t = time.monotonic()
        with pytest.raises(ShareError) as err:
            share.stat("status.json")
        assert time.monotonic() - t < 20
        assert f"127.0.0.1:{relay.port}" in str(err.value)
        t = time.monotonic()
        with pytest.raises(ShareError):  # the next call too: a fresh connection, bounded by its timeout
            share.read_text("status.json")
        assert time.monotonic() - t < 20
    finally:
        runner.close()
        relay.listener.close()
