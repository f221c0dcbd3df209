"""Where things live on the workspace share — the one place these paths are spelled.

::

    .batchai/workspace.json
    .batchai/clusters/<cluster>/cluster.json           spec and target size
    .batchai/clusters/<cluster>/claims/<node>.json     which job holds a node (written by the wrapper)
    .batchai/experiments/<exp>/experiment.json
    .batchai/experiments/<exp>/jobs/<job>/job.json     the job spec as submitted (secrets redacted)
    .batchai/experiments/<exp>/jobs/<job>/status.json  state, exit code, times, failure reason (wrapper)
    .batchai/experiments/<exp>/jobs/<job>/wd/          the uploaded script: the ranks' working directory
    .batchai/experiments/<exp>/jobs/<job>/run/         wrapper, launch config, hostfile, wrapper log
    <prefix>/experiments/<exp>/jobs/<job>/stdouterr/   stdout.txt, stderr.txt, execution-<node>.log, prep logs
    <prefix>/experiments/<exp>/jobs/<job>/outputs/<ID> output directories (AZ_BATCHAI_OUTPUT_<ID>)

``<prefix>`` is the job's ``std_out_err_path_prefix`` made share-relative, ``.batchai`` by default —
the same nesting Batch AI used under stdOutErrPathPrefix.
"""

from __future__ import annotations

from .share import join

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


def claims_dir(cluster: str) -> str:
    return join(cluster_dir(cluster), "claims")


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
