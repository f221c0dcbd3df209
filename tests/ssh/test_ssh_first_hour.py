"""Setting up SSH as a newcomer does, against the real sshd nodes: each mistake gets an error naming the key,
user@host and port with the ssh command to try; one file describes the cluster for Python and the CLI;
`batchai configure --backend ssh` takes every option Workspace.ssh does."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from sshd import DEAD_ADDRESS, NODE_ADDRESSES, SSHNodes, keygen

from batchai_sdk import JobState, NodeError, SSHAuthenticationError, ValidationError, Workspace
from batchai_sdk.backends.ssh.cluster_file import option_names
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi


def options(nodes: SSHNodes, root: Path, **extra: object) -> dict[str, object]:
    """Workspace.ssh's keywords for these nodes, as a user would write them (nothing made for them)."""
    return {
        "hosts": NODE_ADDRESSES[:2],
        "user": nodes.user,
        "key_file": str(nodes.key_file),
        "port": nodes.port,
        "share_path": str(root / "share"),
        "state_dir": str(root / "client"),
        "node_state_dir": str(root / "node_state"),
        "python": sys.executable,
        "tcp_interface": "lo",
        "authorized_keys_path": str(nodes.authorized_keys),
        "trust_on_first_use": True,
        "connect_timeout": 5.0,
        **extra,
    }


def test_a_wrong_key_names_the_key_the_login_and_the_command_to_try(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    (tmp_path / "share").mkdir()
    other = keygen(tmp_path / "other_key")
    with pytest.raises(SSHAuthenticationError) as err:
        Workspace.ssh("lab", **options(ssh_nodes, tmp_path, key_file=str(other), retries=1))  # type: ignore[arg-type]
    text = str(err.value)
    assert f"the key {other} was not accepted for user {ssh_nodes.user!r}" in text
    assert f"ssh -i {other} -p {ssh_nodes.port} {ssh_nodes.user}@{NODE_ADDRESSES[0]}" in text
    assert err.value.key_file == str(other) and err.value.user == ssh_nodes.user
    assert "share" not in text.split("(try")[0]  # the login is to blame, not the share
    assert "PRIVATE KEY" not in text


def test_a_missing_key_file_is_refused_before_any_connection(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    missing = tmp_path / "no_such_key"
    # the host is dead: had it tried to connect, this would be an SSHError after retries
    with pytest.raises(ValidationError) as err:
        Workspace.ssh("lab", **options(ssh_nodes, tmp_path, key_file=str(missing), hosts=[DEAD_ADDRESS]))  # type: ignore[arg-type]
    assert err.value.field == "key_file" and str(missing) in str(err.value) and "ssh-keygen" in str(err.value)


def test_a_mistyped_share_path_is_refused_not_created(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as err:
        Workspace.ssh("lab", **options(ssh_nodes, tmp_path))  # type: ignore[arg-type]
    assert err.value.field == "share_path"
    text = str(err.value)
    assert f"does not exist on {ssh_nodes.user}@{NODE_ADDRESSES[0]}" in text
    assert f"-p {ssh_nodes.port} {ssh_nodes.user}@{NODE_ADDRESSES[0]} mkdir -p {tmp_path / 'share'}" in text
    assert not (tmp_path / "share").exists()


def test_a_dead_host_refuses_the_job_in_a_sentence(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    (tmp_path / "share").mkdir()
    ws = Workspace.ssh("half", **options(ssh_nodes, tmp_path, hosts=[NODE_ADDRESSES[0], DEAD_ADDRESS]))  # type: ignore[arg-type]
    try:
        cluster = ws.create_cluster("c", nodes=2)
        job = ws.create_experiment("e").create_job("j", cluster=cluster, node_count=2, command_line="true")
        with pytest.raises(NodeError) as err:
            job.submit()
        text = str(err.value)
        assert text.startswith("cannot submit job 'j': 1 of the cluster's 2 nodes is unusable: 127.0.0.9: ")
        assert f"(try it by hand: ssh -i {ssh_nodes.key_file} -p {ssh_nodes.port} " in text
    finally:
        ws.close()


def test_one_cluster_file_serves_python_and_the_cli(
    ssh_nodes: SSHNodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "share").mkdir()
    settings = options(ssh_nodes, tmp_path)
    lines = [f"{key}: {json.dumps(value)}" for key, value in settings.items()]
    (tmp_path / "lab.yaml").write_text("# the lab's machines\nname: lab\n" + "\n".join(lines) + "\n")
    ws = Workspace.ssh_from_file(tmp_path / "lab.yaml")
    try:
        assert ws.name == "lab"
        cluster = ws.create_cluster("c", nodes=2)
        exp = ws.create_experiment("e")
        job = exp.create_job("from-python", cluster=cluster, node_count=2, command_line="hostname").submit()
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    finally:
        ws.close()
    assert main(["group", "create", "-n", "g", "-l", "eastus"]) == 0
    assert (
        main(["workspace", "create", "-g", "g", "-w", "lab", "--cluster-file", str(tmp_path / "lab.yaml")])
        == 0
    )
    capsys.readouterr()
    assert main(["job", "list", "-g", "g", "-w", "lab", "-e", "e", "--query", "[].name", "-o", "tsv"]) == 0
    assert capsys.readouterr().out.split() == ["from-python"]

    (tmp_path / "bad.yaml").write_text("hosts: [a]\nuser: u\nshare_path: /s\nkeyfile: k\n")
    with pytest.raises(ValidationError, match="did you mean 'key_file'"):
        Workspace.ssh_from_file(tmp_path / "bad.yaml")


def test_configure_takes_every_option_workspace_ssh_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["configure", "--help"]) == 0
    flags = set(re.findall(r"--[a-z][-a-z]*", capsys.readouterr().out))
    cli_only = {"share_path": "--share-root", "connect_kwargs": None}  # paramiko's dict: cluster files only
    for option in option_names():
        flag = cli_only.get(option, "--" + option.replace("_", "-"))
        assert flag is None or flag in flags, f"batchai configure has no {flag} (Workspace.ssh's {option})"
    assert main(["configure", "--backend", "ssh", "--hosts", "h1", "--user", "u", "--python", "/opt/py",
                 "--authorized-keys-path", "/a", "--tcp-interface", "eth0", "--mpi-args=--mca btl ^openib",
                 "--env", "A=1", "--retries", "5", "-o", "json"]) == 0  # fmt: skip
    ssh = json.loads(capsys.readouterr().out)["ssh"]
    assert ssh == {"hosts": ["h1"], "user": "u", "python": "/opt/py", "authorized_keys_path": "/a",
                   "tcp_interface": "eth0", "mpi_args": ["--mca", "btl", "^openib"], "env": {"A": "1"},
                   "retries": 5}  # fmt: skip
