"""Slurm as the cluster's scheduler: submit is sbatch, terminate is scancel, assignments come from squeue.

Slurm queues and places; the job's launcher (``node/slurm/step.py``, the body of the sbatch script) writes
the job's ``status.json`` on the share from inside the allocation. What it cannot write — a job cancelled
or timed out while pending, a launcher killed with its node — ``refresh`` reconciles from squeue/sacct.

A job's Slurm name is ``batchai.<workspace>.<experiment>.<job>``. A name runs once: submit refuses a name
Slurm has queued or running, and two clients submitting one name at once each submit held, and only the
lower job id is released (the other is cancelled before it could start: ``AlreadyExistsError``).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ... import _layout as layout
from ..._models import ClusterSpec, JobState, utcnow
from ..._staging import ensure_node_code
from ...exceptions import AlreadyExistsError, ValidationError
from ...node.protocol.launch import LaunchConfig
from ...node.protocol.records import Reporter, StatusDoc
from ...share import join
from ..base import Assignment, ClusterScheduler, JobRequest
from . import states
from .commands import QueuedJob
from .script import SbatchRequest, parse_job_name, sbatch_script, slurm_job_name

if TYPE_CHECKING:
    from .backend import SlurmBackend

SCHEDULER = "slurm"  # the service that has a submitted job (status.json's reporter)

SCRIPT_NAME = "job.sbatch"

_PHASES = {"CONFIGURING": "preparing", "COMPLETING": "cleaning"}


def _active(job: QueuedJob) -> bool:
    return not states.job_state(job.state)[0].ended


def _secret_exports(secrets: Mapping[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items()))


class SlurmScheduler(ClusterScheduler):
    def __init__(self, backend: SlurmBackend, spec: ClusterSpec) -> None:
        self.backend = backend
        self.spec = spec
        self.partition = backend.partition_of(spec)

    def __repr__(self) -> str:
        return f"SlurmScheduler({self.backend.workspace!r}, partition={self.partition!r})"

    def job_name(self, experiment: str, name: str) -> str:
        return slurm_job_name(self.backend.workspace, experiment, name)

    def _jobs(self, experiment: str, name: str) -> list[QueuedJob]:
        return self.backend.commands.squeue(names=[self.job_name(experiment, name)])

    # -- ClusterScheduler ---------------------------------------------------------------------------------
    def submit(self, request: JobRequest, *, timeout: float | None = None) -> None:
        """sbatch the job whose launch.json is staged at ``request.launch_config``.

        Raises AlreadyExistsError when Slurm has a job of that name queued or running, SlurmRejectedError
        (with sbatch's message) when Slurm refuses the request, SlurmCommandNotFoundError without sbatch.
        """
        backend, share = self.backend, self.backend.share
        name = self.job_name(request.experiment, request.name)
        for job in self._jobs(request.experiment, request.name):
            if _active(job):
                raise AlreadyExistsError("job", request.name, f"Slurm (job {job.job_id}, {job.state})")
        cfg: LaunchConfig = share.read_json(request.launch_config)
        node_main = posixpath.join(backend.share_path, ensure_node_code(backend.share), "__main__.py")
        ntasks = sum(cfg.get("ranks_per_node") or []) or request.node_count
        if cfg.get("toolkit") != "horovod":
            ntasks = max(ntasks, request.node_count)
        sbatch = SbatchRequest(
            job_name=name,
            nodes=request.node_count,
            ntasks=ntasks,
            stdouterr_dir=cfg["stdouterr_dir"],
            workdir=cfg["wd"],
            launcher=(
                cfg.get("python") or backend.python,
                "-S",
                node_main,
                "slurm-job",
                "batch",
                posixpath.join(backend.share_path, request.launch_config),
                "--mpi",
                backend.mpi,
            ),
            partition=self.partition,
            account=self.spec.extra.get("account") or backend.account,
            constraint=self.spec.extra.get("constraint") or backend.constraint,
            gpus_per_node=int(self.spec.extra.get("gpus_per_node", backend.gpus_per_node) or 0),
            max_wall_clock_seconds=request.max_wall_clock_seconds,
            hold=True,
            comment=f"batchai {request.key}",
            extra=backend.sbatch_options,
        )
        script = sbatch_script(sbatch)
        share.write_text(
            join(posixpath.dirname(request.launch_config), SCRIPT_NAME), script
        )  # never a secret
        if request.secrets:
            # Secrets reach the job through its batch script, which only its owner and Slurm's admins can
            # read (slurmctld's state folder); never the share, never a command line.
            head, _, body = script.partition("\n\n")
            script = f"{head}\n\n{_secret_exports(request.secrets)}{body}"
        job_id = backend.commands.sbatch(script, timeout=timeout)
        rivals = [
            j
            for j in self._jobs(request.experiment, request.name)
            if j.job_id != job_id and _active(j) and _job_number(j.job_id) < _job_number(job_id)
        ]
        if rivals:
            backend.commands.scancel([job_id])
            raise AlreadyExistsError(
                "job", request.name, f"Slurm (job {rivals[0].job_id} was submitted first)"
            )
        status_rel = layout.SHARE.status_record(request.experiment, request.name)
        record = dict(share.read_json_or_none(status_rel) or {})
        doc = StatusDoc.from_dict(record).updated(
            slurm_job_id=job_id, reporter=Reporter(service=SCHEDULER), heartbeat=utcnow().isoformat()
        )  # accepted: Slurm has the job (held until this record is written)
        share.write_json(status_rel, doc.to_dict())
        backend.commands.release(job_id)

    def terminate(self, experiment: str, name: str, *, timeout: float | None = None) -> bool:
        """scancel every queued or running Slurm job of that name; the record says terminated."""
        ids = [j.job_id for j in self._jobs(experiment, name) if _active(j)]
        if ids:
            self.backend.commands.scancel(ids, timeout=timeout)
        self.refresh(experiment, name)
        return bool(ids)

    def assignments(self) -> Mapping[str, Assignment]:
        """node → this workspace's job on it (nodes that run other users' jobs are absent)."""
        out: dict[str, Assignment] = {}
        for job in self.backend.commands.squeue(all_states=False):
            parsed = parse_job_name(job.name)
            if parsed is None or parsed[0] != self.backend.workspace:
                continue
            for node in job.nodes:
                out[node] = Assignment(
                    job=f"{parsed[1]}/{parsed[2]}", phase=_PHASES.get(job.state, "running")
                )
        return out

    # -- reconciliation -----------------------------------------------------------------------------------
    def slurm_state(self, job_id: str) -> tuple[JobState, str | None, QueuedJob] | None:
        """Slurm's view of one job (squeue, else sacct); None when Slurm no longer knows it."""
        found = self.backend.commands.squeue(job_ids=[job_id])
        if not found:
            found = self.backend.commands.sacct([job_id]) or []
        for job in found:
            if job.job_id == job_id:
                state, reason = states.job_state(
                    job.state, exit_code=job.exit_code, time_limit=job.time_limit
                )
                return state, reason, job
        return None

    def refresh(self, experiment: str, name: str) -> dict[str, Any] | None:
        """Bring the job's status record in line with Slurm where its launcher could not write it.

        A record that has ended is final. A job Slurm still queues gets a fresh heartbeat (a pending job
        is not lost). Returns the record as written, or None when there is none to reconcile.
        """
        share = self.backend.share
        status_rel = layout.SHARE.status_record(experiment, name)
        record = share.read_json_or_none(status_rel)
        if not record or not record.get("slurm_job_id"):
            return record  # type: ignore[no-any-return]
        if JobState.from_raw(record.get("state")).ended:
            return record  # type: ignore[no-any-return]
        job_id = str(record["slurm_job_id"])
        seen = self.slurm_state(job_id)
        record = dict(record)
        if seen is None:
            record.update(
                state="failed",
                end_time=utcnow().isoformat(),
                failure_reason=f"Slurm no longer knows job {job_id} and its launcher recorded no end",
            )
        else:
            state, reason, job = seen
            if state.ended:
                # read again: the job may have started and ended since the first read (Slurm ends a job
                # once its batch script, the launcher, exited, having written its own record), and that
                # record, with its start, exit code and reason, is the job's, not Slurm's short view
                fresh = share.read_json_or_none(status_rel)
                if fresh and JobState.from_raw(fresh.get("state")).ended:
                    return fresh  # type: ignore[no-any-return]
                record = dict(fresh or record)
                record.update(state=state.value, end_time=utcnow().isoformat(), failure_reason=reason)
                record.pop("pending", None)
            elif state is JobState.QUEUED or record.get("state") in (None, "queued"):
                record["heartbeat"] = utcnow().isoformat()
                if state is JobState.QUEUED:  # why it waits, in squeue's words and ours, and until when
                    start = self.backend.commands.start_time(job_id)
                    why = replace(states.pending_reason(job.reason), estimated_start=start)
                    record["pending"] = why.to_dict()
                else:
                    record.pop("pending", None)
            else:
                return record
        doc = StatusDoc.from_dict(record)
        if doc.reporter is None:
            doc = doc.updated(reporter=Reporter(service=SCHEDULER))
        share.write_json(status_rel, doc.to_dict())
        return doc.to_dict()


def _job_number(job_id: str) -> int:
    head = job_id.split("_")[0].split("+")[0]
    if not head.isdigit():
        raise ValidationError("slurm job id", job_id, "a number")
    return int(head)
