"""SSHBackend against real sshd nodes: node setup (cluster key, strict ssh config), status, cleanup."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import DEAD_ADDRESS, NODE_ADDRESSES, SSHNode, SSHNodes

from batchai_sdk._models import ClusterSpec, NodeState
from batchai_sdk.backends.ssh import SSHBackend
from batchai_sdk.exceptions import NodeError, ValidationError

pytestmark = pytest.mark.ssh


def make_backend(nodes: SSHNodes, root: Path, hosts: list[str] | None = None, **kwargs: object) -> SSHBackend:
    share = root / "share"
    share.mkdir(parents=True, exist_ok=True)
    options: dict[str, object] = {
        "hosts": NODE_ADDRESSES[:2] if hosts is None else hosts,
        "user": nodes.user,
        "key_file": nodes.key_file,
        "port": nodes.port,
        "share_path": str(share),
        "trust_on_first_use": True,
        "state_dir": root / "client",
        "node_state_dir": str(root / "node"),
        "authorized_keys_path": str(nodes.authorized_keys),
        "connect_timeout": 5.0,
    }
    options.update(kwargs)
    return SSHBackend("lab", **options)  # type: ignore[arg-type]


@pytest.fixture
def backend(ssh_nodes: SSHNodes, tmp_path: Path) -> Iterator[SSHBackend]:
    b = make_backend(ssh_nodes, tmp_path)
    b.share.write_json(".batchai/workspace.json", {"name": "lab"})
    yield b
    b.close()


def spec(name: str = "c", nodes: int = 2, node_setup: str | None = None) -> ClusterSpec:
    return ClusterSpec(name=name, vm_size="Standard_NC6", nodes=nodes, node_setup=node_setup)


def authorized_lines(nodes: SSHNodes, backend: SSHBackend, cluster: str) -> list[str]:
    """The lines of authorized_keys that let ``cluster``'s nodes in."""
    comment = " " + backend.cluster_key_comment(cluster)
    return [line for line in nodes.authorized_keys.read_text().splitlines() if line.endswith(comment)]


def test_node_setup_lets_nodes_reach_each_other_with_strict_host_keys(
    ssh_nodes: SSHNodes, backend: SSHBackend, tmp_path: Path
) -> None:
    c = spec()
    nodes = backend.cluster_status(c).nodes
    backend.prepare(c, nodes)
    target = backend.launch_target(c, nodes)
    cluster_dir = tmp_path / "node" / "clusters" / "c"
    key = cluster_dir / "id_ed25519"
    assert key.stat().st_mode & 0o777 == 0o600
    assert "PRIVATE KEY" in key.read_text()
    assert len(authorized_lines(ssh_nodes, backend, "c")) == 1
    config = (cluster_dir / "ssh_config").read_text()
    assert "StrictHostKeyChecking yes" in config and "BatchMode yes" in config
    assert (cluster_dir / "known_hosts").read_text() == ssh_nodes.known_hosts_text(NODE_ADDRESSES[:2])

    # what the job wrapper on the head node does to reach the second node
    head = backend.runner(nodes[0])
    hop = shlex.join([*(target.ssh_command or ()), "127.0.0.3", "echo reached $SSH_CONNECTION"])
    result = head.run(hop, timeout=30)
    assert result.ok, result.stderr
    assert result.stdout.startswith("reached ") and "127.0.0.3" in result.stdout

    # a host the client never pinned is refused: checking is strict, not disabled
    stranger = SSHNode("127.0.0.8", ssh_nodes.port, tmp_path, ssh_nodes.authorized_keys)
    stranger.start()
    try:
        refused = head.run(shlex.join([*(target.ssh_command or ()), "127.0.0.8", "true"]), timeout=30)
    finally:
        stranger.stop()
    assert refused.exit_code == 255 and "Host key verification failed" in refused.stderr


def test_launch_target_for_mpirun_over_ssh(backend: SSHBackend, tmp_path: Path) -> None:
    backend.tcp_interface = "lo"
    c = spec()
    nodes = backend.cluster_status(c).nodes
    target = backend.launch_target(c, nodes)
    cfg = str(tmp_path / "node" / "clusters" / "c" / "ssh_config")
    assert [n.id for n in target.nodes] == ["127.0.0.2", "127.0.0.3"]
    assert target.ssh_command == ("ssh", "-F", cfg)
    assert target.mpi_args == (
        "--mca", "plm_rsh_agent", f"ssh -F {cfg}",
        "--mca", "btl", "self,tcp",
        "--mca", "btl_tcp_if_include", "lo",
        "--mca", "oob_tcp_if_include", "lo",
    )  # fmt: skip
    assert target.node_share_root == str(tmp_path / "share")
    assert target.mount_root == str(tmp_path)
    assert target.temp_root == str(tmp_path / "node" / "tmp")
    assert target.python == "python3" and target.mpirun == "mpirun"


def test_setup_runs_again_only_when_it_changed(
    ssh_nodes: SSHNodes, backend: SSHBackend, tmp_path: Path
) -> None:
    nodes = backend.cluster_status(spec()).nodes
    backend.prepare(spec(node_setup="echo one"), nodes)
    log = Path(backend.share_path) / ".batchai/clusters/c/setup/stdout-setup-127.0.0.2.txt"
    assert log.read_text().count("node setup of 127.0.0.2 started") == 1
    backend.prepare(spec(node_setup="echo one"), nodes)
    assert log.read_text().count("node setup of 127.0.0.2 started") == 1
    backend.prepare(spec(node_setup="echo two"), nodes)  # a new setup command: it runs again
    assert log.read_text().count("node setup of 127.0.0.2 started") == 2
    assert "two" in log.read_text()
    assert len(authorized_lines(ssh_nodes, backend, "c")) == 1  # the key is authorized once

    # another client (no local copy of the cluster key) takes it back from the head: no new setup
    other = make_backend(ssh_nodes, tmp_path, state_dir=tmp_path / "other_client")
    try:
        other.prepare(spec(node_setup="echo two"), nodes)
    finally:
        other.close()
    assert log.read_text().count("node setup of 127.0.0.2 started") == 2
    assert (tmp_path / "other_client/clusters/c/id_ed25519.pub").read_text() == (
        tmp_path / "client/clusters/c/id_ed25519.pub"
    ).read_text()

    # a new key for the cluster (its copies lost everywhere) replaces the old one in authorized_keys
    old_line = authorized_lines(ssh_nodes, backend, "c")
    for stale in (tmp_path / "client/clusters/c/id_ed25519", tmp_path / "node/clusters/c/id_ed25519"):
        stale.unlink()
    backend.prepare(spec(node_setup="echo two"), nodes)
    new_line = authorized_lines(ssh_nodes, backend, "c")
    assert len(new_line) == 1 and new_line != old_line
    assert new_line[0] == (tmp_path / "client/clusters/c/id_ed25519.pub").read_text().strip()


def test_unreachable_nodes_are_unusable_and_fail_prepare(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    b = make_backend(ssh_nodes, tmp_path, hosts=[NODE_ADDRESSES[0], DEAD_ADDRESS, NODE_ADDRESSES[1]])
    try:
        c = spec(nodes=3)
        status = b.cluster_status(c)
        assert dict(status.node_states) == {DEAD_ADDRESS: NodeState.UNUSABLE}
        assert DEAD_ADDRESS in status.reasons[DEAD_ADDRESS]
        with pytest.raises(NodeError) as err:
            b.prepare(c, status.nodes)
        assert list(err.value.failures) == [DEAD_ADDRESS]
        assert err.value.succeeded == [NODE_ADDRESSES[0], NODE_ADDRESSES[1]]
        assert not (tmp_path / "node" / "clusters" / "c").exists()  # nothing set up anywhere
    finally:
        b.close()


def test_cluster_size_limits_and_bad_arguments(
    ssh_nodes: SSHNodes, backend: SSHBackend, tmp_path: Path
) -> None:
    with pytest.raises(ValidationError) as err:
        backend.create_cluster(spec(nodes=3))
    assert err.value.field == "nodes"
    with pytest.raises(ValidationError):
        backend.resize_cluster(spec(), 3)
    backend.resize_cluster(spec(), 0)
    for bad, field in (
        ({"hosts": "127.0.0.2"}, "hosts"),
        ({"hosts": []}, "hosts"),
        ({"share_path": "relative/share"}, "share_path"),
        ({"port": 0}, "port"),
        ({"jump_host": "user@:22"}, "jump_host"),
    ):
        with pytest.raises(ValidationError) as err:
            make_backend(ssh_nodes, tmp_path, **bad)
        assert err.value.field == field


def test_delete_cluster_removes_its_key_everywhere(
    ssh_nodes: SSHNodes, backend: SSHBackend, tmp_path: Path
) -> None:
    c = spec(name="gone")
    backend.prepare(c, backend.cluster_status(c).nodes)
    keep = spec(name="kept")
    backend.prepare(keep, backend.cluster_status(keep).nodes)
    assert len(authorized_lines(ssh_nodes, backend, "gone")) == 1
    backend.delete_cluster(c)
    backend.delete_cluster(c)  # already gone: no error
    assert authorized_lines(ssh_nodes, backend, "gone") == []
    assert len(authorized_lines(ssh_nodes, backend, "kept")) == 1
    assert not (tmp_path / "node" / "clusters" / "gone").exists()
    assert not (tmp_path / "client" / "clusters" / "gone").exists()
    assert (tmp_path / "node" / "clusters" / "kept" / "id_ed25519").exists()
    assert backend.share.stat(".batchai/clusters/gone/setup") is None
    # the test's own client key is untouched
    assert ssh_nodes.authorized_keys.read_text().count("batchai-test-client") == 1


def test_another_client_takes_the_key_back_from_a_node_that_answers_when_the_first_host_is_gone(
    ssh_nodes: SSHNodes, backend: SSHBackend, tmp_path: Path
) -> None:
    nodes = backend.cluster_status(spec()).nodes
    backend.prepare(spec(), nodes)
    before = authorized_lines(ssh_nodes, backend, "c")
    # another client whose first host (the lost head) does not answer: the key of the nodes that do,
    # not a new one that would lock the head's scheduler out once it came back
    dead = "127.0.0.99"
    other = make_backend(ssh_nodes, tmp_path, hosts=[dead, *NODE_ADDRESSES[:2]], state_dir=tmp_path / "c2")
    try:
        answering = tuple(n for n in nodes if n.address != dead)
        other.prepare(spec(), answering)
    finally:
        other.close()
    assert (tmp_path / "c2/clusters/c/id_ed25519.pub").read_text() == (
        tmp_path / "client/clusters/c/id_ed25519.pub"
    ).read_text()
    assert authorized_lines(ssh_nodes, backend, "c") == before
