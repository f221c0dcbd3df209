"""A cluster's mounts on Azure VMs: the node setup script runs for real as root in a private mount namespace
(its /etc is a throwaway copy); ``mount``, ``mountpoint`` and ``blobfuse2`` are stand-ins recording their argv,
since neither SMB, NFS nor Azure Blob can be reached. The exact command and fstab lines are the test."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from batchai_sdk import AzureBlobContainer, AzureFileShare, FileServer, UnmanagedFileSystem, ValidationError
from batchai_sdk.backends.azure.node_setup import NodeEnvironment, setup_script

KEY = "d29ya3NwYWNlLWtleSt3aXRoL3NsYXNoZXM9"
OTHER_KEY = "b3RoZXItYWNjb3VudC1rZXkrLz0="
ACCOUNT = "batchaiws"
MOUNTS = (
    AzureFileShare("afs", ACCOUNT, "logs", file_mode="0644", directory_mode="0755"),
    AzureFileShare("ext", "otheraccount", "data", account_key=OTHER_KEY),
    AzureBlobContainer("bfs", ACCOUNT, "images", mount_options="ro"),
    FileServer("nfs", server="10.0.0.4", mount_options="vers=4.1,ro"),
    UnmanagedFileSystem("gluster", mount_command="mount -t glusterfs 10.0.0.5:/gv0"),
)


def _namespaces_work() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


def run_setup(tmp_path: Path, *, fail: str = "") -> subprocess.CompletedProcess[str]:
    env = NodeEnvironment(mount_root=str(tmp_path / "mounts"), temp_root=str(tmp_path / "tmp"))
    script = setup_script(
        account=ACCOUNT, account_key=KEY, share="batchaishare", admin_user="root", env=env,
        install_stack=False, mounts=MOUNTS,
    )  # fmt: skip
    (tmp_path / "setup.sh").write_text(script)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    record = f'echo "$(basename "$0") $*" >> {tmp_path}/argv\n'
    (stubs / "mount").write_text(
        "#!/bin/sh\n" + record + 'for a; do last=$a; done\n'
        + (f'case "$last" in *{fail}) echo "mount error(2): No such file" >&2; exit 32;; esac\n' if fail else "")
        + 'touch "$last/.mounted"\n'
    )  # fmt: skip
    (stubs / "blobfuse2").write_text("#!/bin/sh\n" + record + 'touch "$2/.mounted"\n')
    (stubs / "mountpoint").write_text('#!/bin/sh\n[ -e "$2/.mounted" ]\n')
    for tool in ("mount.cifs", "mount.nfs"):
        (stubs / tool).write_text("#!/bin/sh\nexit 0\n")
    for f in stubs.iterdir():
        f.chmod(0o755)
    shutil.copytree("/etc", tmp_path / "etc", symlinks=True)
    inner = "\n".join([
        "set -e",
        f"mount --bind {tmp_path}/etc /etc",
        "for d in /opt /var/lib /var/log; do mount -t tmpfs tmpfs $d; done",
        "rc=0",
        f"PATH={stubs}:$PATH bash {tmp_path}/setup.sh > {tmp_path}/stdout 2> {tmp_path}/stderr || rc=$?",
        f"cp -a /etc/smbcredentials /etc/blobfuse2 {tmp_path}/ 2>/dev/null || true",
        f"cp /etc/fstab {tmp_path}/fstab",
        f"cp /var/log/batchai-node-setup.log {tmp_path}/setup.log 2>/dev/null || true",
        "exit $rc",
    ])  # fmt: skip
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", inner],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.skipif(not _namespaces_work(), reason="needs root and mount namespaces (unshare)")
def test_every_kind_is_mounted_with_its_exact_lines_and_keys_only_in_0600_files(tmp_path: Path) -> None:
    result = run_setup(tmp_path)
    assert result.returncode == 0, (tmp_path / "stderr").read_text()
    root = tmp_path / "mounts"
    fstab = [line for line in (tmp_path / "fstab").read_text().splitlines() if str(root) in line]
    opts = "nofail,_netdev,vers=3.1.1,credentials=/etc/smbcredentials/{acct}.cred,uid=0,gid=0,dir_mode={d},file_mode={f}"
    rest = "serverino,nosharesock,actimeo=30,mfsymlinks 0 0"
    assert fstab[1:] == [
        f"//{ACCOUNT}.file.core.windows.net/logs {root}/afs cifs "
        + opts.format(acct=ACCOUNT, d="0755", f="0644")
        + f",{rest}",
        "//otheraccount.file.core.windows.net/data "
        f"{root}/ext cifs " + opts.format(acct="otheraccount", d="0777", f="0777") + f",{rest}",
        f"10.0.0.4:/data {root}/nfs nfs nofail,_netdev,vers=4.1,ro 0 0",
    ]
    assert (tmp_path / "argv").read_text().splitlines() == [
        f"mount {root}/batchaishare",
        f"mount {root}/afs",
        f"mount {root}/ext",
        f"blobfuse2 mount {root}/bfs --config-file=/etc/blobfuse2/bfs.yaml -o ro",
        f"mount {root}/nfs",
        f"mount -t glusterfs 10.0.0.5:/gv0 {root}/gluster",
    ]
    config = tmp_path / "blobfuse2" / "bfs.yaml"
    assert f"  account-key: {KEY}" in config.read_text().splitlines()
    assert (
        "  container: images" in config.read_text()
        and f"  path: {tmp_path}/tmp/blobfuse2/bfs" in config.read_text()
    )
    other = tmp_path / "smbcredentials" / "otheraccount.cred"
    assert other.read_text() == f"username=otheraccount\npassword={OTHER_KEY}\n"
    for secret_file in (config, other, tmp_path / "smbcredentials" / f"{ACCOUNT}.cred"):
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600, secret_file
    for name in ("argv", "fstab", "stdout", "stderr", "setup.log"):
        text = (tmp_path / name).read_text() if (tmp_path / name).exists() else ""
        assert KEY not in text and OTHER_KEY not in text, name


@pytest.mark.skipif(not _namespaces_work(), reason="needs root and mount namespaces (unshare)")
def test_a_mount_that_fails_fails_node_setup_naming_it(tmp_path: Path) -> None:
    result = run_setup(tmp_path, fail="/nfs")
    assert result.returncode != 0
    err = (tmp_path / "stderr").read_text()
    assert f"[batchai] failed: mount {tmp_path}/mounts/nfs" in err and "No such file" in err
    assert KEY not in err and OTHER_KEY not in err


def test_a_share_of_another_account_needs_its_key() -> None:
    with pytest.raises(ValidationError) as info:
        setup_script(
            account=ACCOUNT, account_key=KEY, share="s", admin_user="u", env=NodeEnvironment(),
            install_stack=False, mounts=[AzureBlobContainer("bfs", "elsewhere", "data")],
        )  # fmt: skip
    assert info.value.field == "mounts[0].account_key" and "elsewhere" in str(info.value)
    script = setup_script(
        account=ACCOUNT, account_key=KEY, share="s", admin_user="u", env=NodeEnvironment(),
        install_stack=False, mounts=MOUNTS,
    )  # fmt: skip
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert script.count(OTHER_KEY) == 1 and script.count(KEY) == 3  # the workspace share, afs, bfs
