"""A job handle: submit, follow and fetch. Everything it reads comes from the share, so any process
can re-attach with ``experiment.get_job(name)`` while the job runs on its own."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from . import _layout as layout
from . import _lost, _progress, _submit_checks
from ._display import waiting_line
from ._hints import with_hint, with_skipped
from ._job_files import confined, dir_argument, follow_lines, last_lines, list_confined
from ._layout import JobPaths
from ._models import (
    JobSpec,
    JobState,
    JobStatus,
    heartbeat_timeout,
    parse_time,
    utcnow,
    validate_name,
)
from .backends.base import ClusterScheduler
from .cost import Cost, format_cost
from .exceptions import (
    AlreadyExistsError,
    BackendError,
    BatchAIError,
    BatchAITimeoutError,
    JobFailedError,
    NotFoundError,
    ShareError,
    ValidationError,
)
from .node.policy.watchdog import LOG_PATTERNS
from .node.protocol.paths import LAUNCH_CONFIG
from .remote.deadline import io_deadline
from .share import Share, join

if TYPE_CHECKING:
    from ._goodput import Goodput
    from ._models import FileInfo
    from .experiment import Experiment

log = logging.getLogger("batchai_sdk")

STDOUTERR = "stdouterr"
STALE_AFTER = 30.0  # seconds without a refreshed record after which wait() checks on the scheduler


def _stale(status: JobStatus) -> bool:
    beat = status.heartbeat or status.creation_time
    return beat is not None and (utcnow() - beat).total_seconds() > STALE_AFTER


class Job:
    """A training job of an experiment (``Experiment.create_job``): submit it, follow its state and logs, read
    its files and metrics."""

    def __init__(
        self, experiment: Experiment, spec: JobSpec, record: Mapping[str, Any] | None = None
    ) -> None:
        self.experiment = experiment
        self.workspace = experiment.workspace
        self.spec = spec
        self.reattached = False  # from create_job(exist_ok=True): submit() leaves it as it is
        self._mount_notes: list[str] = []  # what the backend made of mounts the cluster does not declare
        self._record = dict(record) if record else None
        self._submit_notes: list[str] | None = None  # the launch configuration's notes, read once
        # Paths come from the validated names, never from a record's contents.
        self.paths = JobPaths.for_spec(spec, self.workspace.share.name)

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def attach(cls, experiment: Experiment, name: str) -> Job:
        """The submitted job ``name`` of ``experiment``, from its record on the share (what
        ``Experiment.get_job`` returns); raises ``NotFoundError`` if there is none."""
        validate_name(name, "job name")
        record = experiment.workspace.share.read_json_or_none(layout.SHARE.job_record(experiment.name, name))
        if record is None:
            raise NotFoundError("job", name, f"experiment {experiment.name!r}")
        spec = JobSpec.from_dict(record["spec"])
        if (spec.name, spec.experiment) != (name, experiment.name):
            raise ValidationError(
                "job record",
                f"{spec.experiment}/{spec.name}",
                f"the job {experiment.name}/{name} its folder holds",
            )
        return cls(experiment, spec, record)

    @classmethod
    def from_batchai_json(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any],
        *,
        experiment: Experiment,
        cluster: Any,
        name: str,
        storage_account: str | None = None,
        storage_key: str | None = None,
    ) -> Job:
        """A job from a Batch AI 2018-05-01 job.json (a path, JSON text or a dict); not yet submitted."""
        from .batchai_json import json_field_error, parse_job_json

        spec = parse_job_json(
            source,
            name=name,
            experiment=experiment.name,
            cluster=cluster if isinstance(cluster, str) else cluster.name,
            storage_account=storage_account,
            storage_key=storage_key,
        )
        try:
            return experiment.job_from_spec(spec)
        except ValidationError as exc:  # refusals name the JSON path the file's author wrote
            raise json_field_error(exc) from exc

    def to_batchai_json(self, *, storage_account: str | None = None, redact: bool = True) -> dict[str, Any]:
        """The job as a Batch AI 2018-05-01 job.json; secret values read ``"***"`` unless ``redact=False``."""
        from .batchai_json import to_job_json

        return to_job_json(self.spec, storage_account=storage_account, redact=redact)

    @property
    def name(self) -> str:
        """The job's name, unique in its experiment."""
        return self.spec.name

    @property
    def submitted(self) -> bool:
        """True once the job has been submitted (it has a record on the share)."""
        return self._record is not None

    # -- checks ---------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise a typed error for what would make submit fail: unknown cluster, capacity, missing script."""
        _submit_checks.checked(self)

    # -- submit -----------------------------------------------------------------------------------------
    def submit(self) -> Job:
        """Upload the script, record the job on the share and queue it with the cluster's scheduler.

        Returns at once; the job runs on its own. A job name runs once: of several processes submitting
        the same name, one succeeds and the others get ``AlreadyExistsError``. Nodes that cannot be
        reached, or a share that refuses a write, fail the call and leave nothing behind.
        """
        if self.submitted:
            if self.reattached:
                log.info(
                    "job %s/%s was submitted before: not submitted again", self.experiment.name, self.name
                )
                return self
            raise AlreadyExistsError(
                "job", self.name, f"experiment {self.experiment.name!r} (already submitted)"
            )
        from . import _submit

        cluster, local_script, script_rel = _submit_checks.checked(self)
        deferred = self.workspace.deferred_sizes.get(cluster.name)
        if deferred is not None and cluster.target_nodes < deferred:  # create_cluster(exist_ok=True)'s size
            from .cluster import GROW_TIMEOUT

            cluster.resize(deferred, wait=True, timeout=GROW_TIMEOUT)
        nodes = _submit.pick_nodes(self, cluster)
        target = _submit.prepare(self, cluster, nodes)
        _submit.reserve_name(self)
        try:
            secrets = _submit.stage(
                self, target, local_script, script_rel, evictable=cluster.vm_priority == "lowpriority"
            )
            _submit.start(self, cluster, nodes, secrets)
        except BaseException:
            _submit.unstage(self)
            raise
        log.info("submitted job %s/%s to cluster %s", self.experiment.name, self.name, cluster.name)
        return self

    def _scheduler(self) -> ClusterScheduler:
        cluster = self.workspace.get_cluster(self.spec.cluster)
        return self.workspace.backend.scheduler(cluster.spec)

    # -- state ------------------------------------------------------------------------------------------
    def _require_submitted(self) -> None:
        if not self.submitted:
            raise BatchAIError(f"job {self.name!r} has not been submitted; call job.submit() first")

    @property
    def status(self) -> JobStatus:
        """The job's current ``JobStatus``, read fresh each time: state, exit code, times, failure reason."""
        self._require_submitted()
        if self.workspace.backend.status_from_scheduler:  # its queue says what our records cannot
            self._scheduler().refresh(self.experiment.name, self.name)
        record = self.workspace.share.read_json_or_none(self.paths.status)
        from .backends.head_scheduler import with_cluster_heartbeat

        key = f"{self.experiment.name}/{self.name}"
        record = with_cluster_heartbeat(self.workspace.share, self.spec.cluster, record, key=key)
        status = JobStatus.from_record(record, timeout=heartbeat_timeout())
        _lost.revive_if_silent(self, status)
        if status.lost:
            status = _lost.confirm_lost(self, status, record or {})
        reason = with_hint(status.failure_reason, self.spec)
        if status.state is JobState.FAILED:
            reason = with_skipped(reason, self._notes())
        return status if reason == status.failure_reason else replace(status, failure_reason=reason)

    def _notes(self) -> list[str]:
        """What the backend left out at submit (e.g. a job preparation skipped on the local backend)."""
        if self._submit_notes is None:
            launch = self.workspace.share.read_json_or_none(join(self.paths.run_dir, LAUNCH_CONFIG)) or {}
            self._submit_notes = [str(n) for n in launch.get("notes") or []]
        return self._submit_notes

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """Each ended attempt of the job, oldest first: index, start, end, nodes, cause, exit_code, reason
        and log_dir (its logs' folder under the job's stdouterr, once a later attempt replaced them)."""
        self._require_submitted()
        record = self.workspace.share.read_json_or_none(self.paths.status) or {}
        return list(record.get("attempts") or [])

    def inject_fault(
        self,
        kind: str,
        *,
        node: str | None = None,
        rank: int | None = None,
        at_step: int | None = None,
        grace_seconds: float = 30.0,
        timeout: float | None = 600.0,
    ) -> dict[str, Any]:
        """A fault drill: put a fault into this running job on purpose, to see what it costs
        (``job.goodput``). Refused (``FaultInjectionRefusedError``) unless its cluster was created with
        ``allow_fault_injection=True``. ``kind``:

        ``kill_rank``  SIGKILL to rank ``rank``'s processes (a crashed rank);
        ``hang_rank``  SIGSTOP to them (a hung rank);
        ``stop_node``  SIGSTOP to every rank of the job on ``node`` and their shims;
        ``lose_node``  every rank and shim of the job on ``node`` killed, the attempt ended as that node's
        loss and the node kept out until it answers again;
        ``evict``      the simulated eviction of ``node`` (``cluster.simulate_eviction``; ``grace_seconds``).

        ``node`` defaults to the attempt's last node; ``at_step`` waits until the job logged that step
        (``log_metric(step=...)``) in its current attempt. Returns the fault as recorded (kind, node, rank,
        at_step, time, attempt) in ``faults.jsonl`` of the job's run folder."""
        from ._faults import inject_fault

        self._require_submitted()
        return inject_fault(
            self, kind, node=node, rank=rank, at_step=at_step, grace_seconds=grace_seconds, timeout=timeout
        )

    @property
    def goodput(self) -> Goodput:
        """Productive step time / wall time (``log_metric(step=...)`` records of every attempt, from the
        first attempt's start to the job's end or now), with what each fault cost: detection, restart
        (requeue, placement, start-up) and recomputed steps (docs/survive.md)."""
        from ._goodput import compute

        self._require_submitted()
        share = self.workspace.share
        record = share.read_json_or_none(self.paths.status) or {}
        running = record.get("state") == "running" and record.get("start_time")
        current = {"index": record.get("attempt") or 0, "start": record["start_time"]} if running else None
        end = parse_time(record.get("end_time")) if not running else None
        return compute(
            list(record.get("attempts") or []),
            current,
            self._step_records(),
            end=end if record.get("state") not in ("queued", "running") else None,
            faults=self._fault_times(),
        )

    def _step_records(self) -> list[tuple[int, float]]:
        """(step, time) of every attempt's metrics.jsonl (``_metrics.metric_files``: the one run's files)."""
        from ._goodput import step_records
        from ._metrics import metric_files

        share = self.workspace.share
        out: list[tuple[int, float]] = []
        for _, path in metric_files(self):
            with contextlib.suppress(NotFoundError, ShareError):
                out.extend(step_records(share.read_text(path).splitlines()))
        return out

    def _fault_times(self) -> dict[int, str]:
        """The drills' fault times by attempt index (``inject_fault`` records them in the run folder)."""
        from ._faults import FAULTS_RECORD, read_faults

        with contextlib.suppress(NotFoundError, ShareError):
            text = self.workspace.share.read_text(join(self.paths.run_dir, FAULTS_RECORD))
            return {int(f["attempt"]): str(f["time"]) for f in read_faults(text) if "attempt" in f}
        return {}

    @property
    def state(self) -> JobState:
        """The job's current ``JobState`` (``status.state``)."""
        return self.status.state

    @property
    def exit_code(self) -> int | None:
        """The job's exit code once it has ended (None before)."""
        return self.status.exit_code

    @property
    def cost(self) -> Cost | None:
        """Estimated cost so far (price per node-hour × nodes × hours run), printed ``$0.42``; None when
        the price is unknown."""
        from .cost import cost_of_job

        return cost_of_job(self)

    def estimate_cost(self, hours: float | None = None) -> Cost | None:
        """What the job costs if it runs ``hours`` (default: ``max_wall_clock_time``, else 1 hour): the
        cluster's price per node-hour × ``node_count`` × hours, before ``submit()``; None when the price
        is unknown. ``job.estimate_cost(0.5)`` → ``$1.80`` for 2 nodes at $1.80/h."""
        from .cost import estimate_job_cost

        return estimate_job_cost(self, hours)

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_interval: float = 1.0,
        show_output: bool | str = False,
        raise_on_failure: bool = False,
        out: IO[str] | None = None,
        show_progress: bool | None = None,
    ) -> JobState:
        """Block until the job ends; returns its final state.

        ``show_output=True`` (or a file name such as ``"stderr.txt"``) prints that log while waiting;
        otherwise a spinner shows the state and elapsed time on a terminal or in a notebook.
        ``raise_on_failure`` raises ``JobFailedError`` unless the job succeeded.
        """
        self._require_submitted()
        deadline = None if timeout is None else time.monotonic() + timeout
        if show_output:
            name = show_output if isinstance(show_output, str) else "stdout.txt"
            stream = out or sys.stdout
            with io_deadline(None if deadline is None else deadline + 1.0):
                for line in self.stream(name, follow=True, poll_interval=poll_interval, timeout=timeout):
                    print(line, file=stream)
        started = time.monotonic()
        next_check = started + STALE_AFTER
        with _progress.status(f"job {self.name}", False if show_output else show_progress) as update:
            while True:
                try:  # the share's reads end with the timeout too (a silent host would hold one io_timeout)
                    with io_deadline(None if deadline is None else deadline + 1.0):
                        status = self.status
                except (ShareError, BackendError) as exc:
                    if deadline is None or time.monotonic() < deadline:
                        raise
                    raise BatchAITimeoutError(f"job {self.name!r} to end ({exc})", timeout or 0) from exc
                if status.state.ended:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise BatchAITimeoutError(
                        f"job {self.name!r} to end (state {status.state}{self._silence(status)})",
                        timeout or 0,
                    )
                if time.monotonic() > next_check and _stale(status):
                    self._revive_scheduler()
                    next_check = time.monotonic() + STALE_AFTER
                update(waiting_line(status))  # the job's own time in its state
                time.sleep(poll_interval)
        if raise_on_failure and status.state is not JobState.SUCCEEDED:
            raise JobFailedError(self.name, status.state.value, status.exit_code, status.failure_reason)
        return status.state

    def _silence(self, status: JobStatus) -> str:
        """For a wait that timed out: how long the job has been silent and the knobs for a silent job."""
        knobs = "hang_timeout=SECONDS fails a job silent that long; hang_notice=SECONDS collects its stacks"
        if status.notice:
            return f"; {status.notice}"
        if status.state is not JobState.RUNNING:
            return ""
        try:
            logs = [f for f in self.workspace.share.list(self.paths.stdouterr) if not f.is_dir and f.size]
        except BatchAIError:
            return f"; {knobs}"
        times = [f.modified for f in logs if f.modified is not None and _is_log(f.name)]
        if not times:
            return f"; no output yet; {knobs}"
        last = max(t if t.tzinfo else t.replace(tzinfo=timezone.utc) for t in times)
        silent = max(0, int((datetime.now(timezone.utc) - last).total_seconds()))
        return f"; last output {silent} s ago; {knobs}"

    def _revive_scheduler(self) -> None:
        """The job's records stopped being refreshed: start its cluster's scheduler again if it died (it
        then picks the job up, or records how it ended)."""
        try:
            self._scheduler().ensure_running()
        except BatchAIError as exc:
            log.warning("could not reach the scheduler of cluster %s: %s", self.spec.cluster, exc)

    def terminate(self, *, timeout: float | None = 60, wait: bool = True) -> JobState:
        """Stop the job, queued or running: the cluster's scheduler signals every process of it on every
        node, kills what is left after a grace period and frees its nodes; state ``terminated``."""
        self._require_submitted()
        # its reads and connections end with the timeout too (a head node gone silent names itself)
        with io_deadline(None if timeout is None else time.monotonic() + timeout + 1.0):
            status = self.status
            if status.state.ended and not status.lost:
                return status.state
            try:
                found = self._scheduler().terminate(self.experiment.name, self.name, timeout=timeout)
            except NotFoundError:  # the cluster is gone, and its scheduler with it
                found = False
        if not found:
            return _lost.end_lost_job(self)
        if not wait:
            return self.state
        return self.wait(timeout=timeout, poll_interval=0.25)

    def delete(self, *, force: bool = False) -> None:
        """Remove the job's records, logs and output folders: only paths derived from its validated names."""
        if self.submitted and not self.state.ended:
            if not force:
                raise BatchAIError(
                    f"job {self.name!r} is {self.state}; terminate it first or pass force=True"
                )
            self.terminate()
        share = self.workspace.share
        for path in (self.paths.stdouterr, *self.paths.outputs.values(), self.paths.job_dir):
            layout.require_job_path(path, self.experiment.name, self.name)
            share.delete(path, recursive=True)

    # -- files ------------------------------------------------------------------------------------------
    def _dir(self, directory: str | None) -> str:
        if directory in (None, STDOUTERR):
            return self.paths.stdouterr
        if directory in self.paths.outputs:
            return self.paths.outputs[directory]
        raise ValidationError(
            "directory",
            directory,
            f"'stdouterr' or an output directory id of the job "
            f"({', '.join(sorted(self.paths.outputs)) or 'none'})",
        )

    def _source(self, directory: str | None) -> tuple[Share, str]:
        """The share and folder a directory id names: the logs or an output directory on the workspace
        share, or files the backend keeps elsewhere (Azure Batch: ``"batch"``, the task's own files)."""
        if directory is not None and directory != STDOUTERR and directory not in self.paths.outputs:
            other = self.workspace.backend.job_files(self.experiment.name, self.name, directory)
            if other is not None:
                return other, ""
        return self.workspace.share, self._dir(directory)

    def files(self, path: str = "", *, directory: str | None = None) -> list[FileInfo]:
        """The job's files (name, type, size, modified): its logs by default, or an output directory's."""
        self._require_submitted()
        share, root = self._source(directory)
        if share is not self.workspace.share:  # files the backend keeps elsewhere, through its API
            return share.list(join(root, path) if root or path else "")
        return list_confined(share, join(root, path), self.file_roots(), path)

    def dir_argument(self) -> str | None:
        """The share path of the folder the job's ``--dir`` argument names (the training module's output
        folder, as in the tutorial), or None when it has none on the share."""
        return dir_argument(self.spec, self.paths.stdouterr, self.workspace.share.name)

    def file_roots(self) -> list[str]:
        """Where job files are looked up by name, in order: the logs, the output directories, ``--dir``."""
        roots = [self.paths.stdouterr, *self.paths.outputs.values()]
        out_dir = self.dir_argument()
        if out_dir is not None and out_dir not in roots:
            roots.append(out_dir)
        return roots

    def _locate(self, name: str, directory: str | None) -> tuple[Share, str]:
        if directory is not None:
            share, root = self._source(directory)
            return share, join(root, name)
        share = self.workspace.share
        for candidate in self.file_roots():
            if share.exists(join(candidate, name)):
                return share, join(candidate, name)
        return share, join(self.paths.stdouterr, name)

    def _reachable(self, name: str, directory: str | None) -> tuple[Share, str]:
        """``_locate``, refusing a path on the workspace share that leads out of the job's folders."""
        share, path = self._locate(name, directory)
        if share is self.workspace.share:
            path = confined(share, path, self.file_roots(), name)
        return share, path

    def stream(
        self,
        name: str = "stdout.txt",
        *,
        follow: bool = True,
        directory: str | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        status_lines: bool = True,
    ) -> Iterator[str]:
        """Yield the lines of a job file as they are written (without their newline).

        With ``follow`` it waits for the file to appear and grow, and ends once the job has ended and
        the file is drained; each poll reads only the bytes added since the last one. While the job is
        queued it first yields why it waits, one ``StatusLine`` (a ``str``: ``[batchai] ...``) each time
        the reason changes; ``status_lines=False`` leaves them out.
        """
        self._require_submitted()
        if follow and status_lines:
            started = time.monotonic()
            yield from self._pending_lines(poll_interval, timeout)
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - started))
        share, path = self._locate(name, directory)
        check = (
            (lambda: confined(share, path, self.file_roots(), name))
            if share is self.workspace.share
            else None
        )
        ended = (lambda: self.state.ended) if follow else (lambda: True)
        yield from follow_lines(
            share, path, ended=ended, check=check, missing=None if follow else NotFoundError(
                "file", name, f"job {self.name!r}"
            ), poll_interval=poll_interval, timeout=timeout, what=f"job {self.name!r} file {name!r}",
        )  # fmt: skip

    def _pending_lines(self, poll_interval: float, timeout: float | None) -> Iterator[StatusLine]:
        """While the job is queued: why it waits, each time that changes (``stream``'s status lines)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last: tuple[object, ...] | None = None
        while deadline is None or time.monotonic() < deadline:
            status = self.status
            if status.state is not JobState.QUEUED:
                return
            why = status.pending
            seen = (why.kind, why.message, why.position, why.estimated_start) if why else None
            if why is not None and seen != last:
                last = seen
                yield StatusLine(f"[batchai] {self.name} is queued: {why.line()}")
            time.sleep(poll_interval)

    def tail(self, name: str = "stdout.txt", lines: int = 20, *, directory: str | None = None) -> list[str]:
        """The last ``lines`` lines of a job file (reads only its end)."""
        self._require_submitted()
        share, path = self._reachable(name, directory)
        return last_lines(share, path, lines)

    def download(
        self, name: str, dest: str | os.PathLike[str] = ".", *, directory: str | None = None
    ) -> Path:
        """Download a job file (or folder) to ``dest``. Names are looked up in the logs, then in each
        output directory, then in the folder of the job's ``--dir`` argument, unless ``directory`` says
        where."""
        self._require_submitted()
        share, path = self._reachable(name, directory)
        return share.download(path, dest)

    # -- training metrics -------------------------------------------------------------------------------
    def metrics(self, path: str | None = None) -> Any:
        """The job's metric records (``log_metric``'s or the training module's metrics.jsonl) as one run:
        a DataFrame if pandas is installed, else a list of dicts; empty before the first record. A
        requeued job's attempts are joined, each record's ``attempt`` saying which wrote it, and a step a
        resumed attempt logged again keeps only its new values (docs/training.md#one-run-per-job).
        ``path`` is the share path of one metrics.jsonl to read instead; by default it is looked for next
        to the model in the job's ``--dir`` argument, then in the logs and output directories."""
        from ._metrics import load_metrics

        return load_metrics(self, path)

    def plot_metrics(self, path: str | None = None) -> Any:
        """A matplotlib Figure of ``metrics()``: a panel per metric (``val_<name>`` with ``<name>``), each
        series on its own x (``step`` or ``epoch``, as logged), a dashed line where each restart's
        attempt begins; ``path`` picks another file. Needs the ``notebook`` extra."""
        from ._metrics import plot_metrics

        return plot_metrics(self, path)

    # -- views ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The job as ``az batchai job show`` prints it (JSON-ready): state, nodes, times, failure reason,
        attempts, cost."""
        st = self.status if self.submitted else JobStatus(state=JobState.QUEUED)
        return {
            "name": self.name,
            "experiment": self.experiment.name,
            "cluster": self.spec.cluster,
            "nodeCount": self.spec.node_count,
            "toolkit": self.spec.toolkit.value,
            "executionState": st.state.value,
            "exitCode": st.exit_code,
            "creationTime": st.creation_time.isoformat() if st.creation_time else None,
            "startTime": st.start_time.isoformat() if st.start_time else None,
            "endTime": st.end_time.isoformat() if st.end_time else None,
            "failureReason": st.failure_reason,
            "notice": st.notice,
            "pending": st.pending.to_dict() if st.pending else None,
            "schedulingPriority": self.spec.scheduling_priority,
            "constraints": {"maxWallClockTime": _iso_duration(self.spec.max_wall_clock_seconds)},
            "nodes": list(st.nodes),
            "stdOutErrPath": self.paths.stdouterr,
            "attempts": self.attempts if self.submitted else [],
            "cost": format_cost(self.cost) if self.submitted else "unknown",
            "goodput": self._goodput_view(st),
        }

    def _goodput_view(self, status: JobStatus) -> dict[str, Any] | None:
        """``goodput.to_dict()`` for a job that started and logged steps; None otherwise."""
        if not self.submitted or status.start_time is None:
            return None
        try:
            found = self.goodput
        except BatchAIError:
            return None
        return found.to_dict() if found.goodput is not None else None

    def __repr__(self) -> str:
        state = self.state.value if self.submitted else "not submitted"
        return f"Job({self.experiment.name}/{self.name}, {state})"

    def _repr_html_(self) -> str:
        from ._display import job_html

        return job_html(self)


def _iso_duration(seconds: float | None) -> str | None:
    """``PT1H30M`` (Batch AI's ``constraints.maxWallClockTime``), None without a limit."""
    from .batchai_json.values import format_duration

    return format_duration(seconds) if seconds else None


class StatusLine(str):
    """A line ``Job.stream`` adds to a job file's lines (why the job waits), not one of the file's."""

    __slots__ = ()


def _is_log(name: str) -> bool:
    """A file whose growth counts as the job's output (the watchdog's ``LOG_PATTERNS``)."""
    return any(fnmatch.fnmatch(name, pattern) for pattern in LOG_PATTERNS)
