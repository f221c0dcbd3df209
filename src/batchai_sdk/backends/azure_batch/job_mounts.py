"""A job's own mounts (``$AZ_BATCHAI_JOB_MOUNT_ROOT/<path>``) on the Azure Batch engine: pure builders.

Batch mounts storage per pool (``mountConfiguration``), never per job or task. Storage the cluster mounts
is linked from there (``launch.job_mount_links``); the rest is mounted on each node of the job by the
multi-instance task's **coordination command** (it runs on every node of the task before the application
command starts) with the SSH backend's mount script (``backends/ssh/mounts.py``: cifs, NFS, blobfuse2 or
rclone, the unmanaged file system's own command; root or passwordless sudo, which the pool's admin user
has), at ``<storage root>/<storage key>`` on the node, the folder the rank shim links. The script reads
the keys (and a blob container's SAS for rclone) on its standard input: here they come from the task's
environment settings (``BATCHAI_MOUNT_IN_<i>``, the way Batch gives a task its secrets), piped in, never
on the command line; the application command unsets them before the launcher starts.

Each node counts who uses a storage: the coordination command leaves a marker
``<storage root>/.users/<storage key>/<Batch job id>`` and the Batch job's **release task** (it runs on
every node that ran the job, when the job ends; Batch runs one only after a preparation task, hence a
no-op one) takes its marker away and unmounts the storage once no marker is left, both under ``flock`` of
``<storage root>/.lock``: a storage two jobs use on one node is never unmounted under the second.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from ...exceptions import ValidationError
from ...mounts import AzureBlobContainer, AzureFileShare, Mount, describe, storage_key
from ..ssh import mounts as ssh_mounts
from .models import bm

STORAGE_ROOT = "/mnt/batch/tasks/shared/batchai-storage"  # $AZ_BATCH_NODE_SHARED_DIR: every task user's
ENV_PREFIX = "BATCHAI_MOUNT_IN_"


def _admin() -> bm.UserIdentity:
    return bm.UserIdentity(
        auto_user=bm.AutoUserSpecification(
            scope=bm.AutoUserScope.POOL, elevation_level=bm.ElevationLevel.ADMIN
        )
    )


@dataclass(frozen=True)
class JobMounts:
    """What a job's own mounts add to its Batch job and task."""

    coordination: list[str]  # shell lines run first in the coordination command
    env: dict[str, str] = field(repr=False)  # the mount script's input lines, as task environment
    preparation: bm.BatchJobPreparationTask | None = None  # Batch runs a release task only after one
    release: bm.BatchJobReleaseTask | None = None  # unmounts what the job mounted


def _with_keys(mounts: Sequence[Mount], keys: Mapping[str, str]) -> list[Mount]:
    """Each Azure mount with its key: its own, else the workspace account's; refused naming it otherwise."""
    out: list[Mount] = []
    for i, mount in enumerate(mounts):
        if isinstance(mount, AzureFileShare | AzureBlobContainer) and mount.account_key is None:
            key = keys.get(mount.account_name)
            if key is None:
                raise ValidationError(
                    f"mounts[{i}].account_key",
                    None,
                    f"the key of storage account {mount.account_name!r} (it is not the workspace's)",
                )
            mount = replace(mount, account_key=key)
        out.append(mount)
    return out


def job_mounts(
    mounts: Sequence[Mount],
    *,
    cluster_mounts: Sequence[Mount],
    job_id: str,
    keys: Mapping[str, str],
    storage_root: str = STORAGE_ROOT,
) -> JobMounts | None:
    """The job's mounts of storage the cluster does not mount (None when there are none). ``keys``:
    storage account → key for mounts that give none (the workspace's own account)."""
    declared = {storage_key(m) for m in cluster_mounts}
    own = [m for m in mounts if storage_key(m) not in declared]
    if not own:
        return None
    q = shlex.quote
    points = [
        ssh_mounts.MountPoint(m, posixpath.join(storage_root, storage_key(m))) for m in _with_keys(own, keys)
    ]
    script, stdin = ssh_mounts.mount_script(points, secrets_dir=posixpath.join(storage_root, ".secrets"))
    inputs = stdin.splitlines()
    env = {f"{ENV_PREFIX}{i}": line for i, line in enumerate(inputs)}
    feed = " ".join(f'"${{{name}-}}"' for name in env) or "''"
    users = posixpath.join(storage_root, ".users")
    lines = [
        f"mkdir -p {q(users)} || exit 1",
        f"exec 9>>{q(posixpath.join(storage_root, '.lock'))}",
        "command -v flock >/dev/null 2>&1 && flock 9",
        f"report=$(printf '%s\\n' {feed} | /bin/sh -c {q(script)})",
        *(
            f"mkdir -p {q(posixpath.join(users, storage_key(p.mount)))} && "
            f": > {q(posixpath.join(users, storage_key(p.mount), job_id))}"
            for p in points
        ),
        "exec 9>&-",
        "failed=no",
    ]
    for i, point in enumerate(points):
        what = f"{point.path} ({describe(point.mount)})"
        lines += [
            f"if printf '%s\\n' \"$report\" | grep -q '^{ssh_mounts.MARK} {i} missing'; then failed=yes",
            f"  echo {q('job mount ' + what + ' was not mounted:')} "
            f"\"$(printf '%s\\n' \"$report\" | sed -n 's/^{ssh_mounts.MARK} {i} missing //p')\""
            ' "(node $AZ_BATCH_NODE_ID)" >&2; fi',
        ]
    lines.append('[ "$failed" = no ] || exit 1')
    release = [
        f"exec 9>>{q(posixpath.join(storage_root, '.lock'))} || exit 0",
        "command -v flock >/dev/null 2>&1 && flock 9",
    ]
    for point in points:
        holders = posixpath.join(users, storage_key(point.mount))
        p = q(point.path)
        release += [
            f"rm -f {q(posixpath.join(holders, job_id))}",
            f'if [ -z "$(ls -A {q(holders)} 2>/dev/null)" ] && mountpoint -q {p}; then',
            f"  fusermount -u {p} 2>/dev/null || umount {p} || umount -l {p}; rmdir {p} 2>/dev/null",
            "fi",
        ]
    # Batch runs a release task only for a job with a preparation task: this one does nothing
    preparation = bm.BatchJobPreparationTask(
        id="batchai-prepare", command_line="/bin/true", user_identity=_admin(), wait_for_success=True
    )
    unmount = bm.BatchJobReleaseTask(
        id="batchai-unmount",
        command_line=f"/bin/bash -c {q(chr(10).join(release))}",
        user_identity=_admin(),
        max_wall_clock_time=timedelta(minutes=5),
    )
    return JobMounts(coordination=lines, env=env, preparation=preparation, release=unmount)
