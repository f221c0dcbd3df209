"""The `batchai` CLI on the SSH backend: a profile made with `batchai configure`, then the tutorial's
commands against real sshd nodes (mpirun over ssh)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk.cli import main

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

RG = ["-g", "lab.rg", "-w", "lab"]
SCRIPT = """\
import os, socket, sys
sys.stdout.write(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK')} args {sys.argv[1:]}\\n")
"""


def batchai(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, f"batchai {' '.join(argv)} -> {code}\n{err}"
    return out


def test_cli_on_ssh_nodes(
    ssh_nodes: SSHNodes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("BATCHAI_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    share_root = tmp_path / "mnt" / "share"
    share_root.mkdir(parents=True)
    hosts = NODE_ADDRESSES[:2]
    batchai(capsys, "configure", "--backend", "ssh", "--hosts", *hosts, "--user", ssh_nodes.user,
            "--key-file", str(ssh_nodes.key_file), "--share-root", str(share_root),
            "--port", str(ssh_nodes.port), "--trust-on-first-use")  # fmt: skip
    # options without a flag go into the profile's "ssh" object and reach Workspace.ssh untouched
    profile = json.loads((home / "profile.json").read_text())
    profile["ssh"].update(
        node_state_dir=str(tmp_path / "node_state"),
        authorized_keys_path=str(ssh_nodes.authorized_keys),
        python=sys.executable,
        tcp_interface="lo",
        connect_timeout=5.0,
    )
    (home / "profile.json").write_text(json.dumps(profile))
    assert str(ssh_nodes.key_file) in json.dumps(profile) and "PRIVATE KEY" not in json.dumps(profile)

    batchai(capsys, "group", "create", "--name", "lab.rg", "--location", "onprem")
    # the workspace's folder under the share root is made on the head node when missing
    assert not (share_root / "lab.rg" / "lab").exists()
    ws = json.loads(batchai(capsys, "workspace", "create", *RG))
    assert ws["backend"] == "ssh"
    assert (share_root / "lab.rg" / "lab" / ".batchai" / "workspace.json").is_file()
    batchai(capsys, "experiment", "create", *RG, "--name", "exp")
    batchai(capsys, "cluster", "create", *RG, "--name", "c", "--vm-size", "Standard_NC6", "--target", "2")
    row = batchai(capsys, "cluster", "show", *RG, "-n", "c", "-o", "table").splitlines()[2].split()
    assert row[4:] == ["steady", "2", "0", "0", "0", "0"]

    batchai(capsys, "storage", "account", "create", "-g", "lab.rg", "-n", "labstorage")
    batchai(capsys, "storage", "share", "create", "-n", "labshare", "--account-name", "labstorage")
    (tmp_path / "hello.py").write_text(SCRIPT)
    batchai(capsys, "storage", "file", "upload", "--source", "hello.py", "--path", "code/", "--share-name",
            "labshare", "--account-name", "labstorage")  # fmt: skip
    assert (share_root / "lab.rg" / "lab" / "code" / "hello.py").is_file()

    job = ["-e", "exp", *RG]
    batchai(capsys, "job", "create", *job, "-n", "hello", "-c", "c", "--nodes", "2",
            "--python-script", "$AZ_BATCHAI_JOB_MOUNT_ROOT/code/hello.py", "--script-args", "--x 1")  # fmt: skip
    state = batchai(
        capsys, "job", "wait", *job, "-n", "hello", "--interval", "0.5", "--query", "executionState"
    )
    assert json.loads(state) == "succeeded"
    stream = batchai(capsys, "job", "file", "stream", *job, "-j", "hello", "-f", "stdout.txt")
    assert sorted(stream.splitlines()) == ["rank 0 args ['--x', '1']", "rank 1 args ['--x', '1']"]
    batchai(capsys, "cluster", "resize", *RG, "-n", "c", "--target", "0")
    batchai(capsys, "group", "delete", "-n", "lab.rg", "--yes")
    assert json.loads(batchai(capsys, "group", "exists", "-n", "lab.rg")) is False
