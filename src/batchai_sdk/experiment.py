"""An experiment: a named group of jobs."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from ._models import ExperimentSpec, JobSpec, Toolkit
from .exceptions import AlreadyExistsError, NotFoundError
from .job import Job

if TYPE_CHECKING:
    from .cluster import Cluster
    from .workspace import Workspace


def unique_job_name() -> str:
    """``job-20261123-101500-3fa2``: the time, in UTC, and 4 random hex digits."""
    return f"job-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def job_hint(name: str) -> str:
    return f"attach with experiment.get_job({name!r}), choose another name, or pass exist_ok=True"


class Experiment:
    """A named group of jobs in a workspace (``Workspace.create_experiment``); it creates, finds and deletes
    its jobs."""

    def __init__(self, workspace: Workspace, spec: ExperimentSpec) -> None:
        self.workspace = workspace
        self.spec = spec

    @property
    def name(self) -> str:
        """The experiment's name, unique in its workspace."""
        return self.spec.name

    def create_job(
        self,
        name: str | None = None,
        *,
        cluster: Cluster | str,
        node_count: int = 1,
        python_script: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        process_count: int | None = None,
        job_preparation: str | None = None,
        environment: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        std_out_err_path_prefix: str | None = None,
        command_line: str | None = None,
        toolkit: Toolkit | str | None = None,
        toolkit_settings: Mapping[str, Any] | None = None,
        python_interpreter: str | None = None,
        mount_path: str | None = None,
        input_directories: Mapping[str, str] | None = None,
        output_directories: Mapping[str, str] | None = None,
        container_image: str | None = None,
        max_wall_clock_time: float | None = None,
        exist_ok: bool = False,
        hang_timeout: float | None = None,
        max_retries: int = 0,
        retry_on_exit_codes: Sequence[int] = (),
        max_cost: float | None = None,
        source_dir: str | os.PathLike[str] | None = None,
        health_check: str | None = None,
    ) -> Job:
        """Describe a job (nothing runs until ``Job.submit``).

        ``python_script`` is a local file (uploaded at submit), a path on the share written with
        ``$AZ_BATCHAI_JOB_MOUNT_ROOT/...``, or a module name such as ``"batchai_sdk.train.cifar10"``
        (its file is uploaded). ``args`` may use ``$VARS``: they are expanded on the node.
        ``toolkit`` (``"horovod"``, ``"pytorch"``, ``"tensorflow"``, ...) and ``toolkit_settings`` (e.g.
        ``{"communication_backend": "gloo"}``) are Batch AI's ``<toolkit>Settings``: see docs/toolkits.md.
        ``secrets`` are environment variables never written to records or logs.
        ``hang_timeout`` (seconds without output from any rank: stacks collected, job failed; 0 turns it off,
        None is off for your scripts and 30 minutes for the shipped training modules), ``max_retries`` and
        ``retry_on_exit_codes`` (requeue after a lost node or a listed exit code): see "Jobs that survive".
        ``health_check`` (``"basic"`` or ``"full"``): the job's nodes pass the health gate right before it
        starts; a node that fails is kept out and the job waits for healthy ones (docs/health.md).
        """

        if name is None:
            name = unique_job_name()
        elif exist_ok and self.workspace.share.exists(layout.job_record(self.name, name)):
            job = Job.attach(self, name)
            job.reattached = True  # submit() returns it as it is: the script ran this far before
            return job
        cluster_name = cluster if isinstance(cluster, str) else cluster.name
        env = dict(environment or {})
        env.update(secrets or {})
        kind = (
            Toolkit.parse(toolkit)
            if toolkit
            else (Toolkit.HOROVOD if command_line is None else Toolkit.CUSTOM_MPI)
        )
        spec = JobSpec(
            name=name,
            experiment=self.name,
            cluster=cluster_name,
            node_count=node_count,
            toolkit=kind,
            python_script=os.fspath(python_script) if python_script is not None else None,
            args=tuple(args) if not isinstance(args, str) else args,  # type: ignore[arg-type]
            command_line=command_line,
            process_count=process_count,
            python_interpreter=python_interpreter,
            job_preparation=job_preparation,
            environment=env,
            secret_environment=tuple(sorted(secrets or {})),
            std_out_err_path_prefix=std_out_err_path_prefix,
            mount_path=mount_path,
            input_directories=dict(input_directories or {}),
            output_directories=dict(output_directories or {}),
            container_image=container_image,
            max_wall_clock_seconds=max_wall_clock_time,
            hang_timeout=hang_timeout,
            max_retries=max_retries,
            retry_on_exit_codes=retry_on_exit_codes,  # type: ignore[arg-type]  # JobSpec makes it a tuple
            max_cost=max_cost,
            source_dir=os.fspath(source_dir) if source_dir is not None else None,
            health_check=health_check,
            toolkit_settings=toolkit_settings if toolkit_settings is not None else {},
        )
        return self.job_from_spec(spec)

    def job_from_spec(self, spec: JobSpec) -> Job:
        """A Job for ``spec`` (checked against the workspace: cluster, capacity, name, script)."""
        if spec.experiment != self.name:
            spec = spec.replace(experiment=self.name)
        if self.workspace.share.exists(layout.job_record(self.name, spec.name)):
            raise AlreadyExistsError("job", spec.name, f"experiment {self.name!r}", job_hint(spec.name))
        job = Job(self, spec)
        job.check()
        return job

    def get_job(self, name: str) -> Job:
        """The job ``name`` of this experiment; raises ``NotFoundError`` if it has none of that name."""
        return Job.attach(self, name)

    def list_jobs(self) -> list[Job]:
        """The experiment's jobs, in no particular order (empty when it has none)."""
        try:
            entries = self.workspace.share.list(layout.jobs_dir(self.name))
        except NotFoundError:
            return []
        jobs = []
        for entry in entries:
            if entry.is_dir:
                try:
                    jobs.append(Job.attach(self, entry.name))
                except NotFoundError:
                    continue  # a job being created right now, or a stray folder
        return jobs

    def delete_job(self, name: str, *, force: bool = False) -> None:
        """Delete a job's records and logs. A job that has not ended is refused unless ``force``. No error
        if already gone."""
        try:
            job = self.get_job(name)
        except NotFoundError:
            return
        job.delete(force=force)

    def to_dict(self) -> dict[str, Any]:
        """The experiment as ``az batchai experiment show`` prints it (JSON-ready)."""
        return {
            "name": self.name,
            "workspace": self.workspace.name,
            "creationTime": self.spec.created.isoformat(),
        }

    def __repr__(self) -> str:
        return f"Experiment({self.name!r})"

    def _repr_html_(self) -> str:
        """A notebook's view: the experiment's jobs with their state, duration and last val_accuracy."""
        from ._display import experiment_html

        return experiment_html(self)
