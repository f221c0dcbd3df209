"""What ``Job.check`` finds before a submit (``checked``): the cluster and its size, the cluster mounts
the job names, the storage it mounts, the paths it names on them, and the script to upload or already on
the share."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ._layout import share_relative
from ._mount_paths import cluster_mounts_named, resolve
from .exceptions import CapacityError, NotFoundError, ValidationError
from .mounts import AzureBlobContainer, AzureFileShare, describe

if TYPE_CHECKING:
    from .cluster import Cluster
    from .job import Job

log = logging.getLogger("batchai_sdk")


def checked(job: Job) -> tuple[Cluster, Path | None, str | None]:
    """``check()``'s findings: the cluster, and the script to upload or already on the share."""
    cluster = job.workspace.get_cluster(job.spec.cluster)
    if job.spec.node_count > max(cluster.max_nodes, job.workspace.deferred_sizes.get(cluster.name, 0)):
        auto = cluster.spec.autoscale is not None
        raise CapacityError(cluster.name, job.spec.node_count, cluster.max_nodes, autoscale=auto)
    job._mount_notes = check_cluster_mounts(job, cluster)
    check_storage(job)
    check_named_paths(job, cluster)
    from ._requirements import check_requirements

    backend = job.workspace.backend
    check_requirements(job.spec, backend.installs_requirements, backend.kind)
    if not job.spec.toolkit.runs_command_line and job.spec.python_script:
        return (cluster, *script_source(job))
    return cluster, None, None


def check_cluster_mounts(job: Job, cluster: Cluster) -> list[str]:
    """Every ``$AZ_BATCHAI_MOUNT_ROOT/<name>`` the job names is a mount of its cluster; the backend
    refuses the others, naming the cluster's mounts (the local backend makes them folders: a note)."""
    named = cluster_mounts_named(job.spec, share_name=job.workspace.share.name)
    declared = {m.relative_mount_path for m in cluster.spec.mounts}
    undeclared = {name: field for name, field in named.items() if name not in declared}
    notes = job.workspace.backend.undeclared_mounts(cluster.spec, undeclared) if undeclared else []
    for note in notes:
        log.warning("job %s: %s", job.name, note)
    return notes


def check_storage(job: Job) -> None:
    """Each Azure File share and blob container the job mounts exists, where the backend can tell (the
    local backend: its folder was made by ``batchai storage share/container create``, ``ws.storage``
    or an earlier cluster or job): Batch AI's mount of a missing share failed the job's nodes."""
    for i, mount in enumerate(job.spec.mounts):
        if not isinstance(mount, AzureFileShare | AzureBlobContainer):
            continue
        if job.workspace.backend.storage_exists(mount) is not False:
            continue
        if isinstance(mount, AzureFileShare):
            kind, name, make = "file share", mount.share_name, "share"
        else:
            kind, name, make = "blob container", mount.container_name, "container"
        raise NotFoundError(
            kind,
            name,
            f"storage account {mount.account_name!r} (mounts[{i}], at "
            f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{mount.relative_mount_path}; create it with: batchai storage "
            f"{make} create --name {name} --account-name {mount.account_name}, or in Python "
            "ws.storage(mount))",
        )


def check_named_paths(job: Job, cluster: Cluster) -> None:
    """The script, config file and inputs the job names on a mount this machine can read exist: a
    typed error names the path as written and the mount (the workspace share's are checked by
    ``script_source``)."""
    spec = job.spec
    named: list[tuple[str, str]] = []
    if spec.python_script and spec.source_dir is None and not spec.toolkit.runs_command_line:
        named.append(("script", spec.python_script))
    config = spec.toolkit_settings.get("config_file")
    if isinstance(config, str):
        named.append(("config file", config))
    named += [(f"input directory {key}", path) for key, path in spec.input_directories.items()]
    share = job.workspace.share
    for what, path in named:
        if "$" not in path:
            continue
        where = resolve(
            path,
            share_name=share.name,
            mount_path=spec.mount_path,
            job_mounts=spec.mounts,
            cluster_mounts=cluster.spec.mounts,
        )
        if where is None:
            continue
        if where.on == "share":
            if what != "script" and where.rest and not share.exists(where.rest):
                raise NotFoundError(what, path, f"share {share.name!r} (looked for {where.rest!r})")
            continue
        if where.mount is None or job.workspace.backend.storage_exists(where.mount) is not True:
            continue  # a storage this machine cannot read: the nodes find out
        if where.rest and not job.workspace.backend.storage(where.mount).exists(where.rest):
            root = "$AZ_BATCHAI_JOB_MOUNT_ROOT" if where.on == "job" else "$AZ_BATCHAI_MOUNT_ROOT"
            raise NotFoundError(
                what,
                path,
                f"mount {root}/{where.name} ({describe(where.mount)}; looked for {where.rest!r})",
            )


def script_source(job: Job) -> tuple[Path | None, str | None]:
    """(local file to upload, share path of a script already on the share); one of them is set."""
    script = job.spec.python_script or ""
    share = job.workspace.share
    if job.spec.source_dir is not None:
        return source_dir_script(job), None
    if "$" in script:
        rel = share_relative(
            script, mount_path=job.spec.mount_path, share_name=share.name, job_mounts=job.spec.mounts
        )
        if rel is not None and not share.exists(rel):
            raise NotFoundError("script", script, f"share {share.name!r} (looked for {rel!r})")
        return None, rel
    from ._staging import resolve_local_script

    local = resolve_local_script(script)
    if local is None:
        raise NotFoundError("script", script, "this machine (a file path or an importable module name)")
    return local, None


def source_dir_script(job: Job) -> Path:
    """The script inside ``source_dir``, the folder checked (size, links) before anything is uploaded."""
    root = Path(job.spec.source_dir or "").expanduser()
    if not root.is_dir():
        raise ValidationError("source_dir", job.spec.source_dir, "a folder on this machine")
    from ._staging import code_files

    code_files(root)  # typed errors for a folder too large or with links out of it
    script = root / (job.spec.python_script or "")
    if not script.is_file() or root.resolve() not in script.resolve().parents:
        raise ValidationError(
            "python_script", job.spec.python_script, f"a file inside source_dir {str(root)!r}"
        )
    return script
