"""An experiment: a named group of jobs."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from ._models import ExperimentSpec, JobSpec, Toolkit, validate_name
from .exceptions import AlreadyExistsError, NotFoundError
from .job import Job
from .mounts import Mount

if TYPE_CHECKING:
    from .cluster import Cluster
    from .tuning import EarlyStop, Sweep
    from .workspace import Workspace


def unique_job_name() -> str:
    """``job-20261123-101500-3fa2``: the time, in UTC, and 4 random hex digits."""
    import secrets

    return f"job-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class RerunChangedWarning(UserWarning):
    """``create_job(name, exist_ok=True)`` found the job, run before with other settings: it is returned as
    it is, and the new settings are not run."""


_COMPARED = (
    "python_script",
    "args",
    "node_count",
    "command_line",
    "toolkit",
    "environment",
    "cluster",
    "source_dir",
)


def changed_fields(old: JobSpec, new: JobSpec) -> list[str]:
    """The settings a re-run changed (secrets are compared by name only: their values are never stored)."""
    return [f for f in _COMPARED if getattr(old, f) != getattr(new, f) and f != "environment"] + (
        ["environment"] if _public_env(old) != _public_env(new) else []
    )


def _public_env(spec: JobSpec) -> dict[str, str]:
    return {k: v for k, v in spec.environment.items() if k not in spec.secret_environment}


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
        mounts: Sequence[Mount] = (),
        input_directories: Mapping[str, str] | None = None,
        output_directories: Mapping[str, str] | None = None,
        container_image: str | None = None,
        max_wall_clock_time: float | None = None,
        exist_ok: bool = False,
        hang_timeout: float | None = None,
        hang_notice: float | None = None,
        max_retries: int = 0,
        retry_on_exit_codes: Sequence[int] = (),
        max_cost: float | None = None,
        source_dir: str | os.PathLike[str] | None = None,
        health_check: str | None = None,
        scheduling_priority: str = "normal",
        install_requirements: bool = True,
    ) -> Job:
        """Describe a job (nothing runs until ``Job.submit``).

        ``python_script`` is a local file (uploaded at submit, alone), a path on the share written with
        ``$AZ_BATCHAI_JOB_MOUNT_ROOT/...``, or a module name such as ``"batchai_sdk.train.cifar10"``
        (its file is uploaded). A script that imports modules beside it needs ``source_dir``: the local
        project folder, uploaded whole (``.batchaiignore`` leaves files out), ``python_script`` then a
        path inside it (``source_dir="proj", python_script="train.py"``); the job runs in that folder.
        ``args`` may use ``$VARS``: they are expanded on the node.
        ``toolkit`` (``"horovod"``, ``"pytorch"``, ``"tensorflow"``, ...) and ``toolkit_settings`` (e.g.
        ``{"communication_backend": "gloo"}``) are Batch AI's ``<toolkit>Settings``: see docs/toolkits.md.
        ``secrets`` are environment variables never written to records or logs.
        ``mount_path`` is where the job sees the workspace share under ``$AZ_BATCHAI_JOB_MOUNT_ROOT``;
        ``mounts`` (``batchai_sdk.mounts``) are its other storage, each at its ``relative_mount_path`` there.
        ``hang_timeout`` (seconds without progress, a new ``log_metric`` step once the job reports steps,
        else output: stacks collected, job failed with a verdict naming the stuck rank; 0 turns it off,
        None is off for your scripts and 30 minutes for the shipped training modules); ``hang_notice``
        (observe mode, on by default: once steps come, no new step for max(3 × the median step interval,
        60 s); before that, this many seconds without output, 600 by default; the stacks are collected and
        ``job.status.notice`` and the job's output name the rank that differs, the job going on; 0 turns
        it off; under 60 it lowers the steps rule's floor too);
        ``max_retries`` and ``retry_on_exit_codes`` (requeue after a lost node or a listed exit code): see
        "Jobs that survive".
        ``health_check`` (``"basic"`` or ``"full"``): the job's nodes pass the health gate right before it
        starts; a node that fails is kept out and the job waits for healthy ones (docs/health.md).
        ``scheduling_priority`` (``"low"``, ``"normal"``, ``"high"``): the cluster's queue starts higher
        priorities first, then first come (Batch AI's ``schedulingPriority``).
        ``install_requirements``: a ``requirements.txt`` (else ``pyproject.toml``'s dependencies) in
        ``source_dir`` is installed by the job's preparation into a venv of the job's own on each node
        (``--system-site-packages``, cached by hash); where it cannot be, submit refuses. False: they are
        installed already (docs/training.md#dependencies).
        """

        if name is None:
            name = unique_job_name()
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
            mounts=tuple(mounts),
            input_directories=dict(input_directories or {}),
            output_directories=dict(output_directories or {}),
            container_image=container_image,
            max_wall_clock_seconds=max_wall_clock_time,
            hang_timeout=hang_timeout,
            hang_notice=hang_notice,
            max_retries=max_retries,
            retry_on_exit_codes=retry_on_exit_codes,  # type: ignore[arg-type]  # JobSpec makes it a tuple
            max_cost=max_cost,
            source_dir=os.fspath(source_dir) if source_dir is not None else None,
            health_check=health_check,
            toolkit_settings=toolkit_settings if toolkit_settings is not None else {},
            scheduling_priority=str(scheduling_priority).lower(),
            install_requirements=install_requirements,
        )
        if exist_ok and self.workspace.share.exists(layout.SHARE.job_record(self.name, name)):
            job = Job.attach(self, name)
            job.reattached = True  # submit() returns it as it is: the script ran this far before
            changed = changed_fields(job.spec, spec)
            if changed:
                warnings.warn(
                    f"job {self.name}/{name} exists and ran with other {', '.join(changed)}: it is returned "
                    "as it is, not run again. Give the new run another name (name=None: a fresh one), or "
                    f"delete the old one: experiment.delete_job({name!r})",
                    RerunChangedWarning,
                    stacklevel=2,
                )
            return job
        return self.job_from_spec(spec)

    def job_from_spec(self, spec: JobSpec) -> Job:
        """A Job for ``spec`` (checked against the workspace: cluster, capacity, name, script)."""
        if spec.experiment != self.name:
            spec = spec.replace(experiment=self.name)
        if self.workspace.share.exists(layout.SHARE.job_record(self.name, spec.name)):
            raise AlreadyExistsError("job", spec.name, f"experiment {self.name!r}", job_hint(spec.name))
        job = Job(self, spec)
        job.check()
        return job

    def sweep(
        self,
        name: str,
        *,
        grid: Mapping[str, Sequence[Any]] | None = None,
        random: Mapping[str, Any] | None = None,
        trials: int | None = None,
        seed: int | None = None,
        max_concurrent: int = 2,
        early_stop: EarlyStop | None = None,
        trial_hang_timeout: float | None = None,
        exist_ok: bool = False,
        **job_options: Any,
    ) -> Sweep:
        """A hyperparameter sweep: one job per point of ``grid`` (every combination) or ``trials`` draws
        from ``random`` (a list: a choice; ``("loguniform", 1e-4, 1e-1)``, ``("uniform", a, b)``,
        ``("randint", a, b)``), each with ``--name value`` after ``args``; ``job_options`` are
        ``create_job``'s (``cluster=``, ``python_script=``, ``args=``, ...). Nothing runs until
        ``.run()``, which keeps at most ``max_concurrent`` trials unfinished and, with
        ``early_stop=EarlyStop("val_loss", "min")``, stops trials worse than the median. A trial without
        output for ``trial_hang_timeout`` seconds (default ``TRIAL_HANG_TIMEOUT``, an hour; 0: off) is
        ended and counted failed, freeing its slot. See docs/training.md#sweeps."""
        from .tuning import create_sweep

        return create_sweep(
            self,
            name,
            grid=grid,
            random_space=random,
            trials=trials,
            seed=seed,
            max_concurrent=max_concurrent,
            early_stop=early_stop,
            trial_hang_timeout=trial_hang_timeout,
            exist_ok=exist_ok,
            job_options=job_options,
        )

    def get_sweep(self, name: str) -> Sweep:
        """The sweep ``name`` of this experiment; ``NotFoundError`` when there is none."""
        from .tuning import Sweep, sweep_record

        data = self.workspace.share.read_json_or_none(
            sweep_record(self.name, validate_name(name, "sweep name"))
        )
        if data is None:
            raise NotFoundError("sweep", name, f"experiment {self.name!r}")
        return Sweep(self, data)

    def results(self, *, frame: bool = True) -> Any:
        """The experiment's table: one row per job (by name) with its state, duration, cost, hyperparameters
        (``--name value`` arguments and ``log_params``) and final metrics (whatever it logged). A pandas
        DataFrame when pandas is installed (as ``Job.metrics()``), else, or with ``frame=False``, a list
        of dicts."""
        from ._display import result_row
        from ._metrics import as_table

        rows = [result_row(job) for job in sorted(self.list_jobs(), key=lambda j: j.name)]
        return as_table(rows) if frame else rows

    def get_job(self, name: str) -> Job:
        """The job ``name`` of this experiment; raises ``NotFoundError`` if it has none of that name."""
        return Job.attach(self, name)

    def list_jobs(self) -> list[Job]:
        """The experiment's jobs, in no particular order (empty when it has none)."""
        try:
            entries = self.workspace.share.list(layout.SHARE.jobs_dir(self.name))
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
        """A notebook's view: ``results()`` as a table."""
        from ._display import experiment_html

        return experiment_html(self)
