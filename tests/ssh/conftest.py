"""Fixtures for the SSH tests: real sshd nodes on 127.0.0.2-127.0.0.5 (see sshd.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes, sshd_available, start_nodes

from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner


@pytest.fixture(scope="session")
def ssh_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHNodes]:
    if not sshd_available():
        pytest.skip("OpenSSH's sshd is not installed (apt-get install openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("the sshd nodes need root (sshd's privilege separation)")
    with start_nodes(tmp_path_factory.mktemp("sshd"), NODE_ADDRESSES) as nodes:
        yield nodes


@pytest.fixture
def pinned_store(ssh_nodes: SSHNodes, tmp_path: Path) -> HostKeyStore:
    """A store that already pins every node's real host key."""
    path = tmp_path / "known_hosts"
    path.write_text(ssh_nodes.known_hosts_text())
    return HostKeyStore(path)


@pytest.fixture
def make_runner(ssh_nodes: SSHNodes, pinned_store: HostKeyStore) -> Iterator[object]:
    made: list[SSHRunner] = []

    def make(address: str = NODE_ADDRESSES[0], **kwargs: object) -> SSHRunner:
        options: dict[str, object] = {
            "host_keys": pinned_store,
            "user": ssh_nodes.user,
            "port": ssh_nodes.port,
            "key_file": ssh_nodes.key_file,
            "connect_timeout": 5.0,
            "retries": 2,
            "retry_wait": 0.05,
        }
        options.update(kwargs)
        runner = SSHRunner(address, **options)  # type: ignore[arg-type]
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()
