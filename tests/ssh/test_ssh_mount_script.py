"""The SSH backend's mount script, run for real with /bin/sh; ``mount``, ``mountpoint`` and ``blobfuse2`` are
stand-ins recording their argv (this kernel has no cifs/nfs, and Azure cannot be reached): the exact command
lines, keys only on stdin and in 0600 files, and a node without a client only checked."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from batchai_sdk import AzureBlobContainer, AzureFileShare, FileServer
from batchai_sdk.backends.ssh.mounts import MountPoint, describe_missing, mount_script, parse_report

KEY = "YWNjb3VudC1rZXkrd2l0aC9zbGFzaD0="
POINTS = (
    ("afs", AzureFileShare("afs", "acct", "logs", file_mode="0644", account_key=KEY)),
    ("bfs", AzureBlobContainer("bfs", "acct", "images", mount_options="ro", account_key=KEY)),
    ("nfs", FileServer("nfs", server="10.0.0.4", source_directory="/data/x", mount_options="vers=4.1")),
)


def run(tmp_path: Path, *, clients: bool) -> tuple[subprocess.CompletedProcess[str], list[MountPoint]]:
    points = [MountPoint(m, str(tmp_path / "mnt" / name)) for name, m in POINTS]
    script, stdin = mount_script(points, secrets_dir=str(tmp_path / "secrets"))
    stubs = tmp_path / "bin"
    stubs.mkdir()
    record = f'echo "$(basename "$0") $*" >> {tmp_path}/argv\n'
    tools = {"mountpoint": '#!/bin/sh\n[ -e "$2/.mounted" ]\n'}
    if clients:
        tools["mount"] = (
            "#!/bin/sh\n" + record + 'for a; do [ -d "$a" ] && touch "$a/.mounted"; done; exit 0\n'
        )
        tools["blobfuse2"] = "#!/bin/sh\n" + record + 'touch "$2/.mounted"\n'
        tools["mount.cifs"] = tools["mount.nfs"] = "#!/bin/sh\nexit 0\n"
    for name, text in tools.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    path = f"{stubs}:/usr/bin:/bin" if clients else f"{stubs}:/nonexistent"
    env = {"PATH": path, "HOME": str(tmp_path)}
    result = subprocess.run(["/bin/sh", "-c", script], input=stdin, env=env, capture_output=True, text=True)
    return result, points


@pytest.mark.skipif(os.geteuid() != 0, reason="cifs and nfs are mounted only as root")
def test_each_kind_is_mounted_with_its_exact_command_and_the_key_on_stdin_only(tmp_path: Path) -> None:
    result, points = run(tmp_path, clients=True)
    assert result.returncode == 0, result.stderr
    assert parse_report(result.stdout, points) == {}
    mnt, secrets = tmp_path / "mnt", tmp_path / "secrets"
    assert (tmp_path / "argv").read_text().splitlines() == [
        f"mount -t cifs -o vers=3.1.1,credentials={secrets}/acct.cred,"
        f"dir_mode=0777,file_mode=0644,serverino,nosharesock,actimeo=30,mfsymlinks //acct.file.core.windows.net/logs {mnt}/afs",
        f"blobfuse2 mount {mnt}/bfs --config-file={secrets}/blobfuse2-bfs.yaml -o ro",
        f"mount -t nfs -o vers=4.1 10.0.0.4:/data/x {mnt}/nfs",
    ]
    cred, config = secrets / "acct.cred", secrets / "blobfuse2-bfs.yaml"
    assert cred.read_text() == f"username=acct\npassword={KEY}\n"
    assert f"  account-key: {KEY}" in config.read_text().splitlines()
    assert "  container: images" in config.read_text().splitlines()
    for secret in (cred, config):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    script, _ = mount_script(points, secrets_dir=str(secrets))
    assert KEY not in script and KEY not in result.stdout + result.stderr
    # run again: all mounted already, nothing run twice
    again = subprocess.run(["/bin/sh", "-c", script], input=f"{KEY}\n{KEY}\n", capture_output=True, text=True)
    assert parse_report(again.stdout, points) == {}
    assert len((tmp_path / "argv").read_text().splitlines()) == 3


def test_without_clients_a_mount_must_be_there_and_missing_ones_are_named(tmp_path: Path) -> None:
    (tmp_path / "mnt" / "bfs").mkdir(parents=True)  # the admin provides this one
    result, points = run(tmp_path, clients=False)
    missing = parse_report(result.stdout, points)
    assert sorted(missing) == [str(tmp_path / "mnt" / "afs"), str(tmp_path / "mnt" / "nfs")]
    assert "mount.cifs" in missing[str(tmp_path / "mnt" / "afs")]
    assert "mount.nfs" in missing[str(tmp_path / "mnt" / "nfs")]
    assert not (tmp_path / "mnt" / "afs").exists()  # a folder made for a failed mount is taken away
    text = describe_missing({"node-1": missing})["node-1"]
    assert f"{tmp_path}/mnt/afs is not there and was not mounted" in text
