"""The node setup script, run for real as root in a private mount namespace (its /etc, /opt, /var/lib and
/var/log are throwaway copies); only ``mount``/``mountpoint`` are stand-ins, since SMB cannot be reached."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from batchai_sdk.backends.azure.node_setup import NodeEnvironment, setup_script

KEY = "c2VjcmV0LXN0b3JhZ2Uta2V5K3dpdGgvc2xhc2hlcz0="
ACCOUNT = "batchaitest"


def _namespaces_work() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _namespaces_work(), reason="needs root and mount namespaces (unshare)")


def run_setup(
    tmp_path: Path, *, mount_fails: bool = False, times: int = 1
) -> subprocess.CompletedProcess[str]:
    env = NodeEnvironment(mount_root=str(tmp_path / "mounts"), temp_root=str(tmp_path / "tmp"))
    (tmp_path / "setup.sh").write_text(
        setup_script(
            account=ACCOUNT,
            account_key=KEY,
            share="batchaishare",
            admin_user="root",
            env=env,
            install_stack=False,
        )
    )
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    (stubs / "mount").write_text(
        f'#!/bin/sh\necho "$@" >> {tmp_path}/mount-argv\n'
        + (
            "echo 'mount error(13): Permission denied' >&2; exit 32\n"
            if mount_fails
            else 'touch "$1/.mounted"\n'
        )
    )
    (stubs / "mountpoint").write_text('#!/bin/sh\n[ -e "$2/.mounted" ]\n')
    (stubs / "mount.cifs").write_text("#!/bin/sh\nexit 0\n")
    for f in stubs.iterdir():
        f.chmod(0o755)
    if not (tmp_path / "etc").exists():
        shutil.copytree("/etc", tmp_path / "etc", symlinks=True)
    inner = "\n".join(
        [
            "set -e",
            f"mount --bind {tmp_path}/etc /etc",
            "for d in /opt /var/lib /var/log; do mount -t tmpfs tmpfs $d; done",
            "rc=0",
            *[
                f"PATH={stubs}:$PATH bash {tmp_path}/setup.sh >> {tmp_path}/stdout 2>> {tmp_path}/stderr || rc=$?"
                for _ in range(times)
            ],
            f"cp -a /etc/smbcredentials {tmp_path}/smbcredentials 2>/dev/null || true",
            f"cp /etc/fstab {tmp_path}/fstab",
            f"cp /var/log/batchai-node-setup.log {tmp_path}/setup.log 2>/dev/null || true",
            f"cp /var/lib/batchai/node-setup.done {tmp_path}/done 2>/dev/null || true",
            "exit $rc",
        ]
    )
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-c", inner],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_share_is_mounted_with_a_0600_credentials_file_and_the_key_nowhere_else(tmp_path: Path) -> None:
    result = run_setup(tmp_path, times=2)
    assert result.returncode == 0, (tmp_path / "stderr").read_text()

    cred = tmp_path / "smbcredentials" / f"{ACCOUNT}.cred"
    assert cred.read_text() == f"username={ACCOUNT}\npassword={KEY}\n"
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600
    assert stat.S_IMODE(cred.parent.stat().st_mode) == 0o700
    mount_point = tmp_path / "mounts" / "batchaishare"
    lines = [line for line in (tmp_path / "fstab").read_text().splitlines() if "cifs" in line]
    assert len(lines) == 1  # ran twice, one entry
    assert lines[0].startswith(f"//{ACCOUNT}.file.core.windows.net/batchaishare {mount_point} cifs ")
    assert f"credentials=/etc/smbcredentials/{ACCOUNT}.cred" in lines[0]
    assert (tmp_path / "mount-argv").read_text().splitlines() == [str(mount_point)]  # no options, no key
    assert (tmp_path / "done").exists()
    for name in ("fstab", "mount-argv", "stdout", "stderr", "setup.log"):
        path = tmp_path / name
        assert not path.exists() or KEY not in path.read_text(), name
    assert "[batchai] node setup finished" in (tmp_path / "stdout").read_text()


def test_a_failed_mount_fails_setup_with_the_reason_but_not_the_key(tmp_path: Path) -> None:
    result = run_setup(tmp_path, mount_fails=True)
    assert result.returncode != 0
    err = (tmp_path / "stderr").read_text()
    assert "[batchai] failed: mount" in err and "Permission denied" in err
    assert KEY not in err and KEY not in (tmp_path / "stdout").read_text()
    assert not (tmp_path / "done").exists()


def test_the_stack_installation_is_valid_bash() -> None:
    script = setup_script(
        account=ACCOUNT,
        account_key=KEY,
        share="batchaishare",
        admin_user="azureuser",
        env=NodeEnvironment(),
        install_stack=True,
    )
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert script.count(KEY) == 1  # once, inside the credentials heredoc
    assert "horovod==0.28.1" in script and "tensorflow[and-cuda]==2.15.1" in script
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in script and "set -x" not in script
