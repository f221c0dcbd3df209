"""The Batch service as a cluster's scheduler: submit adds a Batch job and its multi-instance task,
terminate terminates the Batch job, assignments come from the pool's nodes, and ``refresh`` brings the
job's status record on the share in line with the task (there is no launcher of ours to write it while
the service queues, places and requeues).

A record that has ended is final. A task the service put back in the queue (a Spot node preempted, a node
lost, a retry) keeps the job's name and Batch ids; the record lists each earlier attempt, and the next
attempt's ranks see ``AZ_BATCHAI_JOB_RESTART_COUNT`` and resume from the checkpoint on the share.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ... import _layout as layout
from ..._models import JobState, parse_time, utcnow
from ..._staging import ensure_node_code
from ...exceptions import AlreadyExistsError
from ...node.protocol.launch import LaunchConfig
from ...node.protocol.records import PendingDoc, Reporter, StatusDoc
from ...share import join
from ..base import Assignment, ClusterScheduler, JobRequest
from . import task as tasks
from .job_mounts import job_mounts
from .pending import pending_reason

if TYPE_CHECKING:
    from .backend import AzureBatchBackend

SUBMIT_GRACE = 120.0  # seconds a submit may take between recording its Batch job and adding the task
STDERR_TAIL = 2048  # bytes of the task's own stderr.txt quoted in a failure reason
SCHEDULER = "azure-batch"
log = logging.getLogger(__name__)


def _attempt(index: int, record: Mapping[str, Any], cause: str) -> dict[str, Any]:
    return {
        "index": index,
        "end": utcnow().isoformat(),
        "nodes": list(record.get("nodes") or []),
        "cause": cause,
        "exit_code": None,
        "reason": None,
    }


def _forget(service: Any, job_id: str) -> None:
    """Delete a Batch job a failed submit made; the submit's own error is the one to raise."""
    try:
        service.delete_job(job_id)
    except Exception:
        log.warning("could not delete Batch job %s after a failed submit", job_id)


def _write(share: Any, rel: str, record: dict[str, Any]) -> dict[str, Any]:
    """The job's status record, written through ``StatusDoc`` (the service has the job: accepted)."""
    doc = StatusDoc.from_dict(record)
    if doc.reporter is None:
        doc = doc.updated(reporter=Reporter(service=SCHEDULER))
    out = doc.to_dict()
    share.write_json(rel, out)
    return out


def job_id_for(experiment: str, name: str, created: str | None) -> str:
    """The Batch job id of one submission: readable, at most 64 characters, and new for a name used
    again after its job was deleted (Batch keeps a completed job's id until it is deleted)."""
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", f"{experiment}-{name}")[:48]
    digest = hashlib.sha256(f"{experiment}/{name}/{created}".encode()).hexdigest()[:12]
    return f"{stem}-{digest}"


def _job_priority(spec: Mapping[str, Any], cluster_priority: object) -> object:
    """The priority the Batch job gets: the job's own ``schedulingPriority`` where it asked for one
    (``low``/``high``), else the cluster's ``job_priority``. Every job spec carries ``normal`` by
    default, so ``normal`` cannot be told from "not given" and defers to the cluster's."""
    own = spec.get("scheduling_priority")
    if own is not None and str(own).strip().lower() != "normal":
        return own
    return cluster_priority if cluster_priority is not None else own


class BatchScheduler(ClusterScheduler):
    def __init__(self, backend: AzureBatchBackend, spec: Any) -> None:
        self.backend = backend
        self.spec = spec

    def __repr__(self) -> str:
        return f"BatchScheduler({self.backend.batch_account!r}, pool={self.backend.pool_id(self.spec)!r})"

    # -- ClusterScheduler ---------------------------------------------------------------------------------
    def submit(self, request: JobRequest, *, timeout: float | None = None) -> None:
        """Add the Batch job and its multi-instance task for the job staged at ``request.launch_config``.
        A task that cannot be added takes its Batch job away again."""
        backend, share = self.backend, self.backend.share
        service = backend.service
        cfg: LaunchConfig = share.read_json(request.launch_config)
        record = dict(
            share.read_json_or_none(layout.SHARE.status_record(request.experiment, request.name)) or {}
        )
        job_record = share.read_json_or_none(layout.SHARE.job_record(request.experiment, request.name)) or {}
        spec = dict(job_record.get("spec") or {})  # schedulingPriority, where the job spec has it
        job_id = job_id_for(request.experiment, request.name, request.created)
        node_main = posixpath.join(backend.share_root(), ensure_node_code(backend.share), "__main__.py")
        config_on_node = posixpath.join(backend.share_root(), request.launch_config)
        temp = posixpath.join(backend.node_temp_root, request.experiment, request.name)
        mounts = job_mounts(
            request.mounts, cluster_mounts=self.spec.mounts, job_id=job_id, keys=backend.workspace_keys()
        )
        job = tasks.job_body(
            job_id=job_id,
            pool_id=backend.pool_id(self.spec),
            key=request.key,
            priority=tasks.batch_priority(_job_priority(spec, self.spec.extra.get("job_priority"))),
            preparation=mounts.preparation if mounts else None,
            release=mounts.release if mounts else None,  # unmounts the job's own mounts when it ends
        )
        task = tasks.task_body(
            node_count=request.node_count,
            application=tasks.application_command(
                python=str(cfg.get("python") or backend.node_python),
                node_main=node_main,
                config=config_on_node,
                run_dir=str(cfg["run_dir"]),
                unset=sorted(mounts.env) if mounts else (),
            ),
            coordination=tasks.coordination_command(
                share_root=backend.share_root(),
                node_main=node_main,
                temp_dir=temp,
                mount_lines=mounts.coordination if mounts else (),
            ),
            env={**(mounts.env if mounts else {}), **request.secrets},
            secret_names=sorted(request.secrets),
            max_retries=request.max_retries,
            max_wall_clock_seconds=request.max_wall_clock_seconds,
        )
        status_rel = layout.SHARE.status_record(request.experiment, request.name)
        # Intent before effect: the record names the Batch job before it exists, and says the service has
        # the job (accepted: a client whose submit fails from here on keeps the job's folder). A client
        # killed between the job and its task leaves a job that refresh() finds and ends (SUBMIT_GRACE).
        doc = StatusDoc.from_dict(record).updated(
            state=record.get("state") or "queued",
            reporter=Reporter(service=SCHEDULER),
            batch_job_id=job_id,
            batch_submitting=utcnow().isoformat(),
        )
        share.write_json(status_rel, doc.to_dict())
        try:
            try:
                service.create_job(job)
            except AlreadyExistsError:
                where = f"Batch account {backend.batch_account} ({job_id})"
                raise AlreadyExistsError("job", request.name, where) from None
            except BaseException:  # it may exist all the same (a reply lost): a job with no task stays
                _forget(service, job_id)  # active under noaction, so it is taken away
                raise
            try:
                service.create_task(job_id, task)
                service.update_job(job_id, tasks.ends_with_its_task())  # now the job ends with its task
            except BaseException:
                _forget(service, job_id)
                raise
        except BaseException:
            # the service does not have the job: the record says so again (the folder is the client's)
            share.write_json(status_rel, StatusDoc.from_dict(record).to_dict())
            raise
        share.write_json(
            status_rel, doc.updated(batch_submitting=None, heartbeat=utcnow().isoformat()).to_dict()
        )

    def _record(self, experiment: str, name: str) -> dict[str, Any] | None:
        return self.backend.share.read_json_or_none(layout.SHARE.status_record(experiment, name))  # type: ignore[no-any-return]

    def terminate(self, experiment: str, name: str, *, timeout: float | None = None) -> bool:
        """Terminate the Batch job (its task on every node); the record says terminated at once."""
        record = self._record(experiment, name) or {}
        job_id = record.get("batch_job_id")
        if not job_id or JobState.from_raw(record.get("state")).ended:
            return False
        if not self.backend.service.terminate_job(str(job_id), tasks.TERMINATE_REASON):
            self.refresh(experiment, name)
            return False
        doc = StatusDoc.from_dict(record).updated(
            state="terminated", end_time=utcnow().isoformat(), failure_reason="terminated by the user"
        )
        self.backend.share.write_json(layout.SHARE.status_record(experiment, name), doc.to_dict())
        return True

    def assignments(self) -> Mapping[str, Assignment]:
        """Batch node id → this workspace's job running there (from the nodes' recent tasks)."""
        service = self.backend.service
        keys: dict[str, str] = {}
        for job in service.list_jobs():
            for item in job.get("metadata") or ():
                if item.get("name") == "batchai-job":
                    keys[str(job.get("id"))] = str(item.get("value"))
        out: dict[str, Assignment] = {}
        for node in service.list_nodes(self.backend.pool_id(self.spec)):
            if str(node.get("state")).lower() != "running":
                continue
            for recent in node.get("recentTasks") or ():
                key = keys.get(str(recent.get("jobId")))
                if key and str(recent.get("taskState")).lower() == "running":
                    out[str(node.get("id"))] = Assignment(job=key, phase="running")
        return out

    def ensure_running(self) -> None:
        """The service needs no reviving; a cluster given autoscale settings gets its formula."""
        if self.spec.autoscale is not None:
            self.backend.enable_autoscale(self.spec)

    # -- reconciliation -----------------------------------------------------------------------------------
    def _pending(self, task: Mapping[str, Any]) -> PendingDoc:
        """Why the active task waits (pending.py), from its pool and the pool's nodes."""
        need = int((task.get("multiInstanceSettings") or {}).get("numberOfInstances") or 1)
        pool_id = self.backend.pool_id(self.spec)
        pool = self.backend.service.get_pool(pool_id)
        nodes = self.backend.service.list_nodes(pool_id) if pool is not None else []
        return pending_reason(pool, nodes, need)

    def refresh(self, experiment: str, name: str) -> dict[str, Any] | None:
        """The job's status record from its Batch task: state, times, nodes, exit code, failure reason
        and the attempts the service requeued. Returns the record as written (None when there is none)."""
        share = self.backend.share
        status_rel = layout.SHARE.status_record(experiment, name)
        record = share.read_json_or_none(status_rel)
        if not record or not record.get("batch_job_id") or JobState.from_raw(record.get("state")).ended:
            return record  # type: ignore[no-any-return]
        job_id = str(record["batch_job_id"])
        service = self.backend.service
        task = service.get_task(job_id, tasks.TASK_ID)
        record = dict(record)
        now = utcnow().isoformat()
        if task is None:
            since = parse_time(record.get("batch_submitting"))
            if since is not None and (utcnow() - since).total_seconds() < SUBMIT_GRACE:
                return record  # its submit is still adding the job and the task
            why = f"Azure Batch no longer knows job {job_id}"
            if since is not None:  # the submitting client died between the job and its task
                service.delete_job(job_id)
                why = f"its submit was interrupted before the task was added (Batch job {job_id} removed)"
            record.update(state="failed", end_time=now, failure_reason=why)
            return _write(share, status_rel, record)
        state, code, reason = tasks.job_state(task)
        info = task.get("executionInfo") or {}
        self._note_requeues(record, task)
        result = (
            share.read_json_or_none(join(layout.SHARE.run_dir(experiment, name), tasks.RESULT_NAME)) or {}
        )
        record["heartbeat"] = now
        if state is JobState.RUNNING:
            record["state"] = "running"
            record.setdefault("start_time", info.get("startTime") or now)
            record["nodes"] = self._nodes(job_id, task)
        elif state is JobState.QUEUED:
            record["state"] = "queued"
            record["pending"] = self._pending(task).to_dict()  # why: its pool's states
        else:
            if state is JobState.FAILED:
                if code is None and isinstance(result.get("exit_code"), int):
                    code = int(result["exit_code"])
                if not result.get("reason"):  # the launcher never ran: Batch's word and the task's stderr
                    found = [r for r in (reason, self._stderr_tail(job_id)) if r]
                    reason = "; ".join(found) or (
                        f"the task exited with code {code}" if code is not None else "the task failed"
                    )
                else:
                    reason = str(result["reason"])
            record.update(
                state=state.value,
                exit_code=code,
                failure_reason=reason,
                start_time=record.get("start_time") or info.get("startTime"),
                end_time=info.get("endTime") or now,
            )
        return _write(share, status_rel, record)

    def _note_requeues(self, record: dict[str, Any], task: Mapping[str, Any]) -> None:
        """One attempt per time the service put the task back in the queue. ``requeueCount`` counts only
        the requeues a user asked for, and ``retryCount`` the failed tries it retried; a task whose node
        was preempted or lost comes back ``active`` with neither moved: that is read from the task's
        state change (running → active) and the nodes' states."""
        seen = int(record.get("batch_requeues") or 0)
        counted = tasks.requeues(task)
        attempts = list(record.get("attempts") or [])
        for _ in range(seen, counted):
            why = "requeued by Azure Batch (a requeue or a retry of a failed try)"
            attempts.append(_attempt(len(attempts), record, why))
        requeued_at = str(task.get("stateTransitionTime") or "")
        back_in_queue = str(task.get("state") or "").lower() == "active" and (
            str(task.get("previousState") or "").lower() == "running" or record.get("state") == "running"
        )
        if back_in_queue and requeued_at and requeued_at != record.get("batch_requeued_at"):
            if counted <= seen:  # no count moved: the node went away under it
                attempts.append(_attempt(len(attempts), record, self._requeue_cause(record)))
            record["batch_requeued_at"] = requeued_at
            record["nodes"] = []
        if len(attempts) != len(record.get("attempts") or []):
            record["attempts"] = attempts
        record["batch_requeues"] = max(seen, counted)

    def _requeue_cause(self, record: Mapping[str, Any]) -> str:
        """Why a running task is queued again: its nodes that the pool now shows preempted."""
        mine = set(record.get("nodes") or ())
        try:
            states = {
                str(n.get("id")): str(n.get("state") or "").lower()
                for n in self.backend.service.list_nodes(self.backend.pool_id(self.spec))
            }
        except Exception:  # the cause is a detail: the attempt is recorded regardless
            states = {}
        preempted = sorted(n for n, st in states.items() if st == "preempted" and (not mine or n in mine))
        if preempted:
            return f"Spot node preempted ({', '.join(preempted)}): requeued by Azure Batch"
        gone = sorted(n for n in mine if n not in states or states[n] in ("unusable", "leavingpool"))
        if gone:
            return f"node lost ({', '.join(gone)}): requeued by Azure Batch"
        return "requeued by Azure Batch (its node was preempted or lost)"

    def _nodes(self, job_id: str, task: Mapping[str, Any]) -> list[str]:
        nodes = []
        primary = (task.get("nodeInfo") or {}).get("nodeId")
        if primary:
            nodes.append(str(primary))
        for sub in self.backend.service.list_subtasks(job_id, tasks.TASK_ID):
            node = (sub.get("nodeInfo") or {}).get("nodeId")
            if node and node not in nodes:
                nodes.append(str(node))
        return nodes

    def _stderr_tail(self, job_id: str) -> str | None:
        """The end of the task's own stderr.txt (the application command's, read with a ranged GET)."""
        service = self.backend.service
        size = service.task_file_size(job_id, tasks.TASK_ID, "stderr.txt")
        if not size:
            return None
        start = max(0, size - STDERR_TAIL)
        data = service.read_task_file(job_id, tasks.TASK_ID, "stderr.txt", start, size - start)
        lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
        return f"the task's stderr.txt ends: {lines[-1][:400]}" if lines else None
