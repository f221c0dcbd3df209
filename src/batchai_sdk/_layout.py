"""Where things live on the workspace share — the one place these paths are spelled.

::

    .batchai/workspace.json
    .batchai/clusters/<cluster>/cluster.json           spec and target size
    .batchai/clusters/<cluster>/nodes.json             which job holds each node (the cluster's scheduler)
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

from .exceptions import ValidationError
from .share import join, normalize

META = ".batchai"
STDOUTERR = "stdouterr"


def workspace_record() -> str:
    return join(META, "workspace.json")


def clusters_dir() -> str:
    return join(META, "clusters")


def cluster_dir(cluster: str) -> str:
    return join(META, "clusters", cluster)


def cluster_record(cluster: str) -> str:
    return join(cluster_dir(cluster), "cluster.json")


def nodes_record(cluster: str) -> str:
    return join(cluster_dir(cluster), "nodes.json")


def node_code_dir(digest: str) -> str:
    return join(META, "node", digest, "batchai_node")


def experiments_dir() -> str:
    return join(META, "experiments")


def experiment_record(experiment: str) -> str:
    return join(META, "experiments", experiment, "experiment.json")


def jobs_dir(experiment: str) -> str:
    return join(META, "experiments", experiment, "jobs")


def job_dir(experiment: str, job: str) -> str:
    return join(jobs_dir(experiment), job)


def job_record(experiment: str, job: str) -> str:
    return join(job_dir(experiment, job), "job.json")


def status_record(experiment: str, job: str) -> str:
    return join(job_dir(experiment, job), "status.json")


def job_wd(experiment: str, job: str) -> str:
    return join(job_dir(experiment, job), "wd")


def job_run_dir(experiment: str, job: str) -> str:
    return join(job_dir(experiment, job), "run")


def job_output_root(prefix: str | None, experiment: str, job: str) -> str:
    return join(prefix or META, "experiments", experiment, "jobs", job)


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
