"""Host keys are pinned: unknown keys refused unless trust on first use is asked for, changed keys always."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNode, SSHNodes, keygen

from batchai_sdk.backends.ssh import SSHBackend
from batchai_sdk.exceptions import HostKeyError
from batchai_sdk.remote.host_keys import HostKeyStore
from batchai_sdk.remote.ssh import SSHRunner

pytestmark = pytest.mark.ssh

MakeRunner = Callable[..., SSHRunner]


def ssh_keygen_fingerprint(public_key_file: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[1]


@pytest.fixture
def spare_node(ssh_nodes: SSHNodes, tmp_path: Path) -> Iterator[SSHNode]:
    """A node of its own (127.0.0.6) whose host key a test may change."""
    node = SSHNode("127.0.0.6", ssh_nodes.port, tmp_path, ssh_nodes.authorized_keys)
    node.start()
    yield node
    node.stop()


def test_unknown_key_is_refused_with_its_fingerprint(
    ssh_nodes: SSHNodes, make_runner: MakeRunner, tmp_path: Path
) -> None:
    store = HostKeyStore(tmp_path / "kh")
    runner = make_runner(host_keys=store)
    with pytest.raises(HostKeyError) as err:
        runner.run("true")
    node = ssh_nodes.nodes[NODE_ADDRESSES[0]]
    assert err.value.fingerprint == ssh_keygen_fingerprint(Path(f"{node.host_key}.pub"))
    assert err.value.host == f"[127.0.0.2]:{ssh_nodes.port}"
    assert "unknown host key" in str(err.value) and "trust_on_first_use" in str(err.value)
    assert not (tmp_path / "kh").exists()  # nothing was recorded
    assert not runner.connected


def test_trust_on_first_use_records_the_key_then_pins_it(
    ssh_nodes: SSHNodes, make_runner: MakeRunner, tmp_path: Path
) -> None:
    path = tmp_path / "kh"
    first = make_runner(host_keys=HostKeyStore(path, trust_on_first_use=True))
    assert first.run("echo hi").stdout == "hi\n"
    assert path.read_text() == ssh_nodes.nodes[NODE_ADDRESSES[0]].host_key_line()
    # later, without TOFU, the recorded key is what lets us in
    strict = make_runner(host_keys=HostKeyStore(path))
    assert strict.run("echo again").stdout == "again\n"
    assert path.read_text().count("\n") == 1


def test_changed_key_is_refused_even_with_trust_on_first_use(
    spare_node: SSHNode, make_runner: MakeRunner, tmp_path: Path
) -> None:
    path = tmp_path / "kh"
    store = HostKeyStore(path, trust_on_first_use=True)
    assert make_runner(spare_node.address, host_keys=store).run("echo before").ok
    pinned = path.read_text()
    spare_node.restart(new_host_key=True)  # the machine now shows another key
    with pytest.raises(HostKeyError) as err:
        make_runner(spare_node.address, host_keys=store, retries=1).run("true")
    assert "CHANGED" in str(err.value) and str(path) in str(err.value)
    assert err.value.fingerprint == ssh_keygen_fingerprint(Path(f"{spare_node.host_key}.pub"))
    assert path.read_text() == pinned  # the new key was not recorded


def test_a_wrong_key_in_given_known_hosts_is_refused(
    ssh_nodes: SSHNodes, make_runner: MakeRunner, tmp_path: Path
) -> None:
    impostor = keygen(tmp_path / "impostor")
    keytype, b64 = Path(f"{impostor}.pub").read_text().split()[:2]
    path = tmp_path / "kh"
    path.write_text(f"[127.0.0.2]:{ssh_nodes.port} {keytype} {b64}\n")
    with pytest.raises(HostKeyError) as err:
        make_runner(host_keys=HostKeyStore(path, trust_on_first_use=True)).run("true")
    assert "CHANGED" in str(err.value)


def test_backend_keeps_pins_per_workspace(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()

    def backend(**kwargs: object) -> SSHBackend:
        return SSHBackend(
            "lab",
            hosts=NODE_ADDRESSES[:2],
            user=ssh_nodes.user,
            key_file=ssh_nodes.key_file,
            port=ssh_nodes.port,
            share_path=str(share),
            state_dir=tmp_path / "state",
            **kwargs,  # type: ignore[arg-type]
        )

    strict = backend()
    with pytest.raises(HostKeyError):
        strict.share.exists("x")
    strict.close()
    tofu = backend(trust_on_first_use=True)
    assert not tofu.share.exists("x")
    tofu.close()
    assert (tmp_path / "state" / "known_hosts").read_text() == ssh_nodes.known_hosts_text(NODE_ADDRESSES[:1])
    again = backend()  # pinned now: no TOFU needed
    assert not again.share.exists("x")
    again.close()
