"""Where things live on the workspace share, as the client names them: every path is derived from
``node/protocol.py`` (the one place the share's paths are spelled, for the client and the nodes alike).

::

    .batchai/workspace.json
    .batchai/clusters/<cluster>/cluster.json           spec and target size
    .batchai/clusters/<cluster>/nodes.json             which job holds each node (the cluster's scheduler)
    .batchai/clusters/<cluster>/size.json              with autoscale: the nodes up now (the scheduler)
    .batchai/clusters/<cluster>/events.jsonl           every scaling decision: time, from, to, why
    .batchai/clusters/<cluster>/events.d/<t>-<id>.json a client's decision (resize), one file each
    .batchai/node/<hash>/batchai_node/                 the node code (scheduler, launcher, rank shim)
    .batchai/experiments/<exp>/experiment.json
    .batchai/experiments/<exp>/jobs/<job>/job.json     the job spec as submitted (secrets redacted)
    .batchai/experiments/<exp>/jobs/<job>/status.json  state, exit code, times, failure reason (scheduler)
    .batchai/experiments/<exp>/jobs/<job>/wd/          the uploaded script: the ranks' working directory
    .batchai/experiments/<exp>/jobs/<job>/run/         launch config, hostfile
    <prefix>/experiments/<exp>/jobs/<job>/stdouterr/   stdout.txt, stderr.txt, execution-<node>.log, prep logs
    <prefix>/experiments/<exp>/jobs/<job>/outputs/<ID> output directories (AZ_BATCHAI_OUTPUT_<ID>)

``<prefix>`` is the job's ``std_out_err_path_prefix`` made share-relative, ``.batchai`` by default —
the same nesting Batch AI used under stdOutErrPathPrefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._mount_paths import resolve
from .exceptions import ValidationError
from .node import protocol
from .share import join, normalize

if TYPE_CHECKING:
    from ._models import JobSpec
    from .mounts import Mount

META = protocol.META
STDOUTERR = "stdouterr"
_SHARE = protocol.SharePaths()  # share-relative: the spelling both halves use, in node/protocol.py


def workspace_record() -> str:
    return _SHARE.workspace_record()


def clusters_dir() -> str:
    return _SHARE.clusters_dir()


def cluster_dir(cluster: str) -> str:
    return _SHARE.cluster_dir(cluster)


def cluster_record(cluster: str) -> str:
    return _SHARE.cluster_record(cluster)


def cluster_size_record(cluster: str) -> str:
    return _SHARE.size_record(cluster)


def cluster_events_record(cluster: str) -> str:
    return _SHARE.events_record(cluster)


def cluster_client_events_dir(cluster: str) -> str:
    return _SHARE.client_events_dir(cluster)


def cluster_health_report(cluster: str, name: str) -> str:
    return join(_SHARE.health_dir(cluster), name)


def cluster_client_event(cluster: str, stamp: str, unique: str) -> str:
    return join(cluster_client_events_dir(cluster), f"{stamp}-{unique}.json")


def nodes_record(cluster: str) -> str:
    return _SHARE.nodes_record(cluster)


def head_record(cluster: str) -> str:
    return _SHARE.head_record(cluster)


def node_code_dir(digest: str) -> str:
    return _SHARE.node_code_dir(digest)


def experiments_dir() -> str:
    return _SHARE.experiments_dir()


def experiment_record(experiment: str) -> str:
    return _SHARE.experiment_record(experiment)


def jobs_dir(experiment: str) -> str:
    return _SHARE.jobs_dir(experiment)


def job_dir(experiment: str, job: str) -> str:
    return _SHARE.job_dir(experiment, job)


def job_record(experiment: str, job: str) -> str:
    return _SHARE.job_record(experiment, job)


def status_record(experiment: str, job: str) -> str:
    return _SHARE.status_record(experiment, job)


def job_wd(experiment: str, job: str) -> str:
    return _SHARE.job_wd(experiment, job)


def job_run_dir(experiment: str, job: str) -> str:
    return _SHARE.run_dir(experiment, job)


def launch_config(experiment: str, job: str) -> str:
    return _SHARE.launch_config(experiment, job)


def job_output_root(prefix: str | None, experiment: str, job: str) -> str:
    return normalize(_SHARE.job_output_root(prefix, experiment, job))


def stdouterr_dir(prefix: str | None, experiment: str, job: str) -> str:
    return join(job_output_root(prefix, experiment, job), STDOUTERR)


def output_dir(prefix: str | None, experiment: str, job: str, output_id: str) -> str:
    return join(job_output_root(prefix, experiment, job), "outputs", output_id)


def require_job_path(path: str, experiment: str, job: str) -> str:
    """``path`` when it lies inside one of the job's own folders (``…/experiments/<exp>/jobs/<job>``),
    else ValidationError before any I/O: nothing outside a job is deleted in its name."""
    rel = normalize(path)
    marker = f"experiments/{experiment}/jobs/{job}"
    parts = rel.split("/")
    inside = any("/".join(parts[i : i + 4]) == marker for i in range(len(parts)))
    if not rel or ".." in parts or not inside:
        raise ValidationError("path", path, f"a folder of job {experiment}/{job}")
    return rel


def share_relative(
    path: str, *, mount_path: str | None, share_name: str, job_mounts: Iterable[Mount] = ()
) -> str | None:
    """The share-relative form of a node path written with Batch AI's variables, or None if not on the
    workspace share (see ``_mount_paths.resolve``: ``$AZ_BATCHAI_JOB_MOUNT_ROOT/<mount_path>/x``, or
    ``$AZ_BATCHAI_JOB_MOUNT_ROOT/x`` when the job mounts nothing, ``$AZ_BATCHAI_MOUNT_ROOT/<share>/x``)."""
    where = resolve(path, share_name=share_name, mount_path=mount_path, job_mounts=job_mounts)
    return where.rest if where is not None and where.on == "share" else None


def log_prefix(path: str, field: str, *, spec: JobSpec, share_name: str) -> str | None:
    """The share-relative prefix for the job's logs or an output directory written as ``path``: None (the
    default place on the workspace share) when ``path`` lies on another mount — our records and logs stay
    on the workspace share, where ``Job.files`` reads them. ValidationError naming ``field`` when ``path``
    names no mount at all."""
    where = resolve(path, share_name=share_name, mount_path=spec.mount_path, job_mounts=spec.mounts)
    if where is None:
        mounts = [spec.mount_path] if spec.mount_path else []
        mounts += [m.relative_mount_path for m in spec.mounts]
        under = ", ".join(f"$AZ_BATCHAI_JOB_MOUNT_ROOT/{m}/" for m in mounts) or "$AZ_BATCHAI_JOB_MOUNT_ROOT/"
        raise ValidationError(
            field, path, f"a path on a mount of the job ({under}) or $AZ_BATCHAI_MOUNT_ROOT/<mount>/"
        )
    return where.rest if where.on == "share" else None


@dataclass(frozen=True)
class JobPaths:
    """Share-relative paths of one job (see _layout)."""

    job_dir: str
    record: str
    status: str
    wd: str
    run_dir: str
    stdouterr: str
    prefix: str | None
    outputs: Mapping[str, str]

    @classmethod
    def for_spec(cls, spec: JobSpec, share_name: str) -> JobPaths:
        prefix = (
            log_prefix(
                spec.std_out_err_path_prefix, "std_out_err_path_prefix", spec=spec, share_name=share_name
            )
            if spec.std_out_err_path_prefix
            else None
        ) or None
        outputs = {}
        for out_id, path_prefix in spec.output_directories.items():
            base = log_prefix(path_prefix, f"output_directories.{out_id}", spec=spec, share_name=share_name)
            outputs[out_id] = output_dir(base or None, spec.experiment, spec.name, out_id)
        return cls(
            job_dir=job_dir(spec.experiment, spec.name),
            record=job_record(spec.experiment, spec.name),
            status=status_record(spec.experiment, spec.name),
            wd=job_wd(spec.experiment, spec.name),
            run_dir=job_run_dir(spec.experiment, spec.name),
            stdouterr=stdouterr_dir(prefix, spec.experiment, spec.name),
            prefix=prefix,
            outputs=outputs,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_dir": self.job_dir,
            "record": self.record,
            "status": self.status,
            "wd": self.wd,
            "run_dir": self.run_dir,
            "stdouterr": self.stdouterr,
            "prefix": self.prefix,
            "outputs": dict(self.outputs),
        }
