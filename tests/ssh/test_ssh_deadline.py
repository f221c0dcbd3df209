"""A caller's deadline bounds the share's reads (remote/deadline.py): inside ``io_deadline`` a read from a
host gone silent fails by the deadline, not after the runner's ``io_timeout`` (30 s by default)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes
from test_ssh_runner import Blackhole

from batchai_sdk.backends.ssh.share import SFTPShare
from batchai_sdk.exceptions import ShareError
from batchai_sdk.remote.deadline import io_deadline
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner

pytestmark = pytest.mark.ssh


def test_a_read_from_a_silent_host_ends_by_the_callers_deadline(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    node = NODE_ADDRESSES[0]
    relay = Blackhole((node, ssh_nodes.port))
    line = ssh_nodes.known_hosts_text([node]).replace(
        f"[{node}]:{ssh_nodes.port}", f"[127.0.0.1]:{relay.port}"
    )
    (tmp_path / "known_hosts").write_text(line)
    runner = SSHRunner(
        "127.0.0.1", port=relay.port, user=ssh_nodes.user, key_file=ssh_nodes.key_file,
        host_keys=HostKeyStore(tmp_path / "known_hosts"), connect_timeout=10.0, retries=3,
    )  # fmt: skip
    assert runner.io_timeout == 30  # the default: what one read waits outside a deadline
    root = tmp_path / "share"
    root.mkdir()
    share = SFTPShare(runner, str(root))
    try:
        share.write_text("status.json", "{}")
        relay.silent.set()  # the host goes dark
        t = time.monotonic()
        with pytest.raises(ShareError) as err, io_deadline(time.monotonic() + 2):
            share.stat("status.json")
        assert time.monotonic() - t < 4
        assert f"127.0.0.1:{relay.port}" in str(err.value) and "within 2" in str(err.value)
    finally:
        runner.close()
        relay.listener.close()
