"""The node setup lines that mount a cluster's mounts on an Azure VM, as Batch AI's nodes had them under
``$AZ_BATCHAI_MOUNT_ROOT/<relativeMountPath>``.

* Azure File shares: SMB 3.1.1 through ``/etc/fstab`` with the key in a 0600 credentials file
  (``/etc/smbcredentials/<account>.cred``), as the workspace share is mounted;
* blob containers: blobfuse2 with a 0600 config file (``/etc/blobfuse2/<path>.yaml``) holding the key, its
  file cache on the VM's local disk (beside the jobs' temp folders);
* NFS file servers: ``/etc/fstab`` (``nfs``, the mount's options), mounted with ``mount``;
* unmanaged file systems: the mount command with the mount point appended, as Batch AI ran it.

Keys are written only inside quoted heredocs of the script, which reaches the VM in the extension's
``protectedSettings``: never on a command line, never echoed, never in the setup log.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence

from ...exceptions import ValidationError
from ...mounts import AzureBlobContainer, AzureFileShare, FileServer, Mount, UnmanagedFileSystem
from ..mount_options import blobfuse_config, cifs_options

BLOBFUSE_DIR = "/etc/blobfuse2"
HEREDOC = "EOF_BATCHAI"


def credentials_path(account: str) -> str:
    return f"/etc/smbcredentials/{account}.cred"


def mount_keys(mounts: Sequence[Mount], *, account: str, account_key: str) -> dict[str, str]:
    """account → key for every Azure mount: the mount's own ``account_key``, else the workspace's key when
    it is the workspace's account; ValidationError naming the mount when neither is known."""
    keys = {account: account_key}
    for i, mount in enumerate(mounts):
        if not isinstance(mount, AzureFileShare | AzureBlobContainer):
            continue
        if mount.account_key is not None:
            keys[mount.account_name] = mount.account_key
        elif mount.account_name not in keys:
            raise ValidationError(
                f"mounts[{i}].account_key",
                None,
                f"the key of storage account {mount.account_name!r} (it is not the workspace's)",
            )
    for key in keys.values():
        if "\n" in key or HEREDOC in key:
            raise ValueError("unexpected characters in a storage key")
    return keys


def _secret_file(path: str, lines: list[str]) -> list[str]:
    """Write ``lines`` to ``path`` with mode 0600 (through a temp file, so a reader never sees half)."""
    q = shlex.quote
    return [
        f"(umask 077; cat > {q(path)}.tmp <<'{HEREDOC}'",
        *lines,
        HEREDOC,
        ")",
        f"chmod 600 {q(path)}.tmp && mv -f {q(path)}.tmp {q(path)}",
    ]


def _fstab(entry: str, mount_point: str, fstype: str) -> list[str]:
    """Put ``entry`` in /etc/fstab in place of any earlier one for ``mount_point`` (setup may run again)."""
    q = shlex.quote
    return [
        f"grep -v {q(' ' + mount_point + ' ' + fstype + ' ')} /etc/fstab > /etc/fstab.batchai || true",
        f"echo {q(entry)} >> /etc/fstab.batchai && mv -f /etc/fstab.batchai /etc/fstab",
    ]


def mount_script(
    mounts: Sequence[Mount], *, mount_root: str, cache_root: str, keys: Mapping[str, str]
) -> list[str]:
    """Bash lines (for setup_script, after its ``run``/``step`` helpers and ``$uid``/``$gid``) that mount
    each of ``mounts`` at ``<mount_root>/<relative_mount_path>`` and fail setup naming the one that did not.
    ``cache_root``: on the VM's local disk, blobfuse2's file cache."""
    q = shlex.quote
    lines: list[str] = []
    tools = {type(m) for m in mounts}
    install = "{ run apt-get update -q; run apt-get install -y -q %s; }"
    if AzureFileShare in tools:
        lines.append("command -v mount.cifs >/dev/null 2>&1 || " + install % "cifs-utils")
    if FileServer in tools:
        lines.append("command -v mount.nfs >/dev/null 2>&1 || " + install % "nfs-common")
    if AzureBlobContainer in tools:
        lines += [
            "if ! command -v blobfuse2 >/dev/null 2>&1; then",
            "  . /etc/os-release",
            '  run curl -fsSLo /tmp/packages-microsoft-prod.deb "https://packages.microsoft.com/config/$ID/'
            '$VERSION_ID/packages-microsoft-prod.deb"',
            "  run dpkg -i /tmp/packages-microsoft-prod.deb",
            "  run apt-get update -q",
            "  run apt-get install -y -q blobfuse2 fuse3",
            "fi",
            f"install -d -m 700 {BLOBFUSE_DIR}",
        ]
    for mount in mounts:
        point = posixpath.join(mount_root, mount.relative_mount_path)
        lines += [f'step "mounting {mount.relative_mount_path}"', f"mkdir -p {q(point)}"]
        if isinstance(mount, AzureFileShare):
            cred = credentials_path(mount.account_name)
            lines += ["install -d -m 700 /etc/smbcredentials"]
            lines += _secret_file(
                cred, [f"username={mount.account_name}", f"password={keys[mount.account_name]}"]
            )
            options = "nofail,_netdev," + cifs_options(mount, cred, owner="uid=$uid,gid=$gid,")
            entry = f"//{mount.file_host}/{mount.share_name} {point} cifs {options} 0 0"
            lines += [
                f"grep -v {q(' ' + point + ' cifs ')} /etc/fstab > /etc/fstab.batchai || true",
                f'echo "{entry}" >> /etc/fstab.batchai && mv -f /etc/fstab.batchai /etc/fstab',
                f"mountpoint -q {q(point)} || run mount {q(point)}",
            ]
        elif isinstance(mount, AzureBlobContainer):
            config = f"{BLOBFUSE_DIR}/{mount.relative_mount_path}.yaml"
            cache = posixpath.join(cache_root, mount.relative_mount_path)
            lines += _secret_file(config, blobfuse_config(mount, keys[mount.account_name], cache=cache))
            argv = ["blobfuse2", "mount", point, f"--config-file={config}"]
            if mount.mount_options:
                argv += ["-o", mount.mount_options]
            lines += [
                f"install -d -m 700 {q(cache)}",
                f"mountpoint -q {q(point)} || run {' '.join(q(a) for a in argv)}",
            ]
        elif isinstance(mount, FileServer):
            options = ",".join(["nofail", "_netdev", *(mount.mount_options or "defaults").split(",")])
            lines += _fstab(f"{mount.remote_path} {point} nfs {options} 0 0", point, "nfs")
            lines.append(f"mountpoint -q {q(point)} || run mount {q(point)}")
        elif isinstance(mount, UnmanagedFileSystem):
            # as Batch AI: the command as written, the mount point appended
            command = q(mount.mount_command + ' "$0"')
            lines.append(f"mountpoint -q {q(point)} || run bash -c {command} {q(point)}")
        lines.append(
            f"mountpoint -q {q(point)} || "
            f"{{ echo {q(f'[batchai] {mount.relative_mount_path} is not mounted at {point}')} >&2; exit 1; }}"
        )
    return lines
