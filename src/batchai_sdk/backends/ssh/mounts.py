"""Mounts on the SSH backend's nodes (machines you bring): node setup mounts what it can, else checks the
path is there. Pure builders of the script and readers of its report; the backend runs it on every node.

Per mount, at its mount point (``<mount root>/<relative_mount_path>`` for a cluster's mounts, the storage
root for a job's): nothing to do when something is mounted there already; else it is mounted —

* an unmanaged file system: its ``mount_command`` with the mount point appended (as Batch AI ran it): sshfs,
  rclone, glusterfs, anything the node has;
* an NFS file server: ``mount -t nfs`` when the node has ``mount.nfs`` and the user is root or has
  passwordless sudo;
* an Azure File share: ``mount -t cifs`` (SMB 3.1.1) when the node has ``mount.cifs``, the same rights and
  the mount's key is known, the key in a 0600 credentials file;
* a blob container: ``blobfuse2`` when the node has it and the key is known, the key in a 0600 config;
  else ``rclone mount`` (daemon, write cache in the node's secrets folder) when the node has rclone, with
  a SAS URL of the container made on the client from the key (azure-storage-blob) in a 0600 rclone config;

— and when it cannot be, the path must be there already (a folder the machine's admin provides). Keys reach
the script on its standard input, one per line, never in its text or argv.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...mounts import AzureBlobContainer, AzureFileShare, FileServer, Mount, UnmanagedFileSystem
from ..mount_options import blob_sas_url, blobfuse_config, cifs_options

MARK = "batchai-mount"


@dataclass(frozen=True)
class MountPoint:
    """A mount and where a node mounts it."""

    mount: Mount
    path: str


def mount_script(points: Sequence[MountPoint], *, secrets_dir: str) -> tuple[str, str]:
    """(the POSIX shell script, its standard input: the keys it needs, one per line). The script prints
    ``batchai-mount <index> ok|mounted|missing <why>`` for each point and exits 0; see ``parse_report``.
    ``secrets_dir``: node-local folder for credentials and blobfuse2 configs (made 0700)."""
    q = shlex.quote
    keys: list[str] = []
    lines = [
        "umask 077",
        f"mkdir -p {q(secrets_dir)} && chmod 700 {q(secrets_dir)}",
        # root, or passwordless sudo (an Azure VM's admin user): then cifs and nfs can be mounted
        'root=no; as_root=""',
        'if [ "$(id -u)" = 0 ]; then root=yes',
        'elif sudo -n true 2>/dev/null; then root=yes; as_root="sudo -n"; fi',
        'has() { command -v "$1" >/dev/null 2>&1; }',
    ]
    for i, point in enumerate(points):
        m, p = point.mount, q(point.path)
        key = m.account_key if isinstance(m, AzureFileShare | AzureBlobContainer) else None
        if key is not None:  # read whether needed or not, so that the next mount reads its own line
            keys.append(key)
            lines.append(f"IFS= read -r key_{i}")
        if isinstance(m, AzureBlobContainer) and key is not None:  # for rclone, where no blobfuse2
            keys.append(blob_sas_url(m, key) or "")
            lines.append(f"IFS= read -r sas_{i}")
        lines += [
            f"if mountpoint -q {p} 2>/dev/null; then echo '{MARK} {i} ok'; else",
            f"  why=''; made=no; [ -d {p} ] || made=yes",
        ]
        if isinstance(m, UnmanagedFileSystem):
            command = q(m.mount_command + ' "$0"')  # as Batch AI: the mount point appended
            lines += [
                f"  mkdir -p {p} && out=$(sh -c {command} {p} 2>&1 </dev/null) || "
                'why="its mount command failed: $(echo "$out" | tail -n 1)"',
            ]
        elif isinstance(m, FileServer):
            lines += _kernel_mount("nfs", m.remote_path, point.path, m.mount_options or "defaults")
        elif isinstance(m, AzureFileShare):
            if m.account_key is None:
                lines.append("  why='no key for the share was given to this client'")
            else:
                cred = posixpath.join(secrets_dir, f"{m.account_name}.cred")
                write_cred = (
                    f"printf 'username=%s\\npassword=%s\\n' {q(m.account_name)} \"$key_{i}\" > {q(cred)}"
                )
                source = f"//{m.file_host}/{m.share_name}"
                lines += _kernel_mount("cifs", source, point.path, cifs_options(m, cred), first=write_cred)
        elif isinstance(m, AzureBlobContainer):
            if m.account_key is None:
                lines.append("  why='no key for the container was given to this client'")
            else:
                config = posixpath.join(secrets_dir, f"blobfuse2-{m.relative_mount_path}.yaml")
                cache = posixpath.join(secrets_dir, f"blobfuse2-cache-{m.relative_mount_path}")
                text = blobfuse_config(m, "@KEY@", cache=cache)
                at = next(n for n, line in enumerate(text) if "@KEY@" in line)
                before, after = "\n".join(text[:at]), "\n".join(text[at + 1 :])
                argv = ["blobfuse2", "mount", point.path, f"--config-file={config}"]
                if m.mount_options:
                    argv += ["-o", m.mount_options]
                lines += [
                    "  if has blobfuse2; then",
                    f"    mkdir -p {q(cache)} {p}",
                    f"    {{ printf '%s\\n' {q(before)}; printf '  account-key: %s\\n' \"$key_{i}\"; "
                    f"printf '%s\\n' {q(after)}; }} > {q(config)}",
                    f"    out=$({' '.join(q(a) for a in argv)} 2>&1) || "
                    'why="blobfuse2 failed: $(echo "$out" | tail -n 1)"',
                    *_rclone(m, i, point.path, secrets_dir),
                    "  else why='no blobfuse2 or rclone here'; fi",
                ]
        # there already (a folder the admin provides), or mounted now; else missing, and a folder this
        # script made is taken away again
        lines += [
            f"  if mountpoint -q {p} 2>/dev/null; then echo '{MARK} {i} mounted'",
            f'  elif [ "$made" = no ] || {{ [ -z "$why" ] && [ -d {p} ]; }}; then echo \'{MARK} {i} ok\'',
            f'  else [ -d {p} ] && rmdir {p} 2>/dev/null; echo "{MARK} {i} missing $why"; fi',
            "fi",
        ]
    return "\n".join(lines) + "\n", "".join(f"{k}\n" for k in keys)


def _rclone(m: AzureBlobContainer, i: int, path: str, secrets_dir: str) -> list[str]:
    """``elif`` lines: rclone mounts the container through its SAS URL (``$sas_<i>``, from stdin)."""
    q = shlex.quote
    config = posixpath.join(secrets_dir, f"rclone-{m.relative_mount_path}.conf")
    cache = posixpath.join(secrets_dir, f"rclone-cache-{m.relative_mount_path}")
    argv = ["rclone", "mount", f"blob:{m.container_name}", path, "--config", config, "--cache-dir", cache]
    argv += ["--vfs-cache-mode", "writes", "--daemon"]
    if m.mount_options:
        argv += ["-o", m.mount_options]
    return [
        "  elif has rclone; then",
        f'    if [ -z "$sas_{i}" ]; then why=\'rclone needs a SAS of the container, made on the client: '
        "install azure-storage-blob there (batchai_sdk[azure])'; else",
        f"    mkdir -p {q(cache)} {q(path)}",
        f"    printf '[blob]\\ntype = azureblob\\nsas_url = %s\\n' \"$sas_{i}\" > {q(config)}",
        f"    out=$({' '.join(q(a) for a in argv)} 2>&1 </dev/null) || "
        'why="rclone mount failed: $(echo "$out" | tail -n 1)"; fi',
    ]


def _kernel_mount(fstype: str, source: str, path: str, options: str, *, first: str = "") -> list[str]:
    """``mount -t <fstype> -o <options> <source> <path>`` where the node has the client and root (or sudo);
    ``first`` runs before it (writing a credentials file)."""
    q = shlex.quote
    client = {"nfs": "NFS client (mount.nfs)", "cifs": "SMB client (mount.cifs)"}[fstype]
    return [
        f'  if has mount.{fstype} && [ "$root" = yes ]; then',
        *([f"    {first}"] if first else []),
        f"    mkdir -p {q(path)} && out=$($as_root mount -t {fstype} -o {q(options)} {q(source)} {q(path)} "
        f'2>&1) || why="mount -t {fstype} failed: $(echo "$out" | tail -n 1)"',
        f"  else why='no {client} here, or not root'; fi",
    ]


def parse_report(stdout: str, points: Sequence[MountPoint]) -> dict[str, str]:
    """path → why, for each mount point the node could not mount and does not have."""
    seen: dict[int, str] = {}
    for line in stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == MARK and parts[1].isdigit():
            seen[int(parts[1])] = parts[2] if parts[2] != "missing" else (parts[3] if len(parts) > 3 else "")
    out = {}
    for i, point in enumerate(points):
        state = seen.get(i)
        if state not in ("ok", "mounted"):
            out[point.path] = state or "the mount script did not report it"
    return out


def describe_missing(missing: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """node → "path: why; ..." for NodeError."""
    return {
        node: "; ".join(
            f"{path} is not there and was not mounted ({why or 'unknown'})" for path, why in paths.items()
        )
        for node, paths in sorted(missing.items())
    }
