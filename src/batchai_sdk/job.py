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
from . import _lost, _progress
from ._display import waiting_line
from ._hints import with_hint, with_skipped
from ._job_files import confined, dir_argument, follow_lines, last_lines, list_confined
from ._layout import JobPaths, share_relative
from ._models import (
    JobSpec,
    JobState,
    JobStatus,
    Node,
    NodeState,
    heartbeat_timeout,
    parse_time,
    utcnow,
    validate_name,
)
from ._mount_paths import cluster_mounts_named, resolve
from .backends.base import ClusterScheduler, JobRequest
from .cost import Cost, format_cost
from .exceptions import (
    AlreadyExistsError,
    BatchAIError,
    BatchAITimeoutError,
    CapacityError,
    JobFailedError,
    NodeError,
    NotFoundError,
    ShareError,
    UnhealthyNodesError,
    ValidationError,
)
from .mounts import AzureBlobContainer, AzureFileShare, describe
from .node.policy.watchdog import LOG_PATTERNS
from .node.protocol import LAUNCH_CONFIG, StatusDoc
from .share import Share, join

if TYPE_CHECKING:
    from ._goodput import Goodput
    from ._models import FileInfo
    from .backends.base import LaunchTarget
    from .cluster import Cluster
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
        record = experiment.workspace.share.read_json_or_none(layout.job_record(experiment.name, name))
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
        self._checked()

    def _checked(self) -> tuple[Cluster, Path | None, str | None]:
        """``check()``'s findings: the cluster, and the script to upload or already on the share."""
        cluster = self.workspace.get_cluster(self.spec.cluster)
        if self.spec.node_count > max(cluster.max_nodes, self.workspace.deferred_sizes.get(cluster.name, 0)):
            auto = cluster.spec.autoscale is not None
            raise CapacityError(cluster.name, self.spec.node_count, cluster.max_nodes, autoscale=auto)
        self._mount_notes = self._check_cluster_mounts(cluster)
        self._check_storage()
        self._check_named_paths(cluster)
        from ._requirements import check_requirements

        backend = self.workspace.backend
        check_requirements(self.spec, backend.installs_requirements, backend.kind)
        if not self.spec.toolkit.runs_command_line and self.spec.python_script:
            return (cluster, *self._script_source())
        return cluster, None, None

    def _check_cluster_mounts(self, cluster: Cluster) -> list[str]:
        """Every ``$AZ_BATCHAI_MOUNT_ROOT/<name>`` the job names is a mount of its cluster; the backend
        refuses the others, naming the cluster's mounts (the local backend makes them folders: a note)."""
        named = cluster_mounts_named(self.spec, share_name=self.workspace.share.name)
        declared = {m.relative_mount_path for m in cluster.spec.mounts}
        undeclared = {name: field for name, field in named.items() if name not in declared}
        notes = self.workspace.backend.undeclared_mounts(cluster.spec, undeclared) if undeclared else []
        for note in notes:
            log.warning("job %s: %s", self.name, note)
        return notes

    def _check_storage(self) -> None:
        """Each Azure File share and blob container the job mounts exists, where the backend can tell (the
        local backend: its folder was made by ``batchai storage share/container create``, ``ws.storage``
        or an earlier cluster or job): Batch AI's mount of a missing share failed the job's nodes."""
        for i, mount in enumerate(self.spec.mounts):
            if not isinstance(mount, AzureFileShare | AzureBlobContainer):
                continue
            if self.workspace.backend.storage_exists(mount) is not False:
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

    def _check_named_paths(self, cluster: Cluster) -> None:
        """The script, config file and inputs the job names on a mount this machine can read exist: a
        typed error names the path as written and the mount (the workspace share's are checked by
        ``_script_source``)."""
        spec = self.spec
        named: list[tuple[str, str]] = []
        if spec.python_script and spec.source_dir is None and not spec.toolkit.runs_command_line:
            named.append(("script", spec.python_script))
        config = spec.toolkit_settings.get("config_file")
        if isinstance(config, str):
            named.append(("config file", config))
        named += [(f"input directory {key}", path) for key, path in spec.input_directories.items()]
        share = self.workspace.share
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
            if where.mount is None or self.workspace.backend.storage_exists(where.mount) is not True:
                continue  # a storage this machine cannot read: the nodes find out
            if where.rest and not self.workspace.backend.storage(where.mount).exists(where.rest):
                root = "$AZ_BATCHAI_JOB_MOUNT_ROOT" if where.on == "job" else "$AZ_BATCHAI_MOUNT_ROOT"
                raise NotFoundError(
                    what,
                    path,
                    f"mount {root}/{where.name} ({describe(where.mount)}; looked for {where.rest!r})",
                )

    def _script_source(self) -> tuple[Path | None, str | None]:
        """(local file to upload, share path of a script already on the share); one of them is set."""
        script = self.spec.python_script or ""
        share = self.workspace.share
        if self.spec.source_dir is not None:
            return self._source_dir_script(), None
        if "$" in script:
            rel = share_relative(
                script, mount_path=self.spec.mount_path, share_name=share.name, job_mounts=self.spec.mounts
            )
            if rel is not None and not share.exists(rel):
                raise NotFoundError("script", script, f"share {share.name!r} (looked for {rel!r})")
            return None, rel
        from ._staging import resolve_local_script

        local = resolve_local_script(script)
        if local is None:
            raise NotFoundError("script", script, "this machine (a file path or an importable module name)")
        return local, None

    def _source_dir_script(self) -> Path:
        """The script inside ``source_dir``, the folder checked (size, links) before anything is uploaded."""
        root = Path(self.spec.source_dir or "").expanduser()
        if not root.is_dir():
            raise ValidationError("source_dir", self.spec.source_dir, "a folder on this machine")
        from ._staging import code_files

        code_files(root)  # typed errors for a folder too large or with links out of it
        script = root / (self.spec.python_script or "")
        if not script.is_file() or root.resolve() not in script.resolve().parents:
            raise ValidationError(
                "python_script", self.spec.python_script, f"a file inside source_dir {str(root)!r}"
            )
        return script

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
        cluster, local_script, script_rel = self._checked()
        deferred = self.workspace.deferred_sizes.get(cluster.name)
        if deferred is not None and cluster.target_nodes < deferred:  # create_cluster(exist_ok=True)'s size
            from .cluster import GROW_TIMEOUT

            cluster.resize(deferred, wait=True, timeout=GROW_TIMEOUT)
        nodes = self._pick_nodes(cluster)
        target = self._prepare(cluster, nodes)
        self._reserve_name()
        try:
            secrets = self._stage(
                target, local_script, script_rel, evictable=cluster.vm_priority == "lowpriority"
            )
            self._start(cluster, nodes, secrets)
        except BaseException:
            self._unstage()
            raise
        log.info("submitted job %s/%s to cluster %s", self.experiment.name, self.name, cluster.name)
        return self

    def _pick_nodes(self, cluster: Cluster) -> tuple[Node, ...]:
        """The cluster's usable nodes; a typed error when too few of them are up for the job."""
        backend = self.workspace.backend
        if backend.queues_for_nodes:  # the service places the job once nodes exist
            return ()
        spec = cluster.spec
        scale_set = spec.autoscale is not None and backend.scale_set(spec) is not None
        if spec.autoscale is not None and not scale_set:
            spec = replace(spec, nodes=cluster.max_nodes)  # the scheduler grows into these for the job
        status = backend.cluster_status(spec)
        nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
        if len(nodes) < self.spec.node_count and scale_set:  # new VMs join once this client pins them
            cluster.grow_for(self.spec.node_count, why=f"job {self.experiment.name}/{self.name} submitted")
            status = backend.cluster_status(spec)
            nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
        if len(nodes) >= self.spec.node_count and spec.autoscale is None:
            unhealthy = cluster.failed_health()
            if unhealthy and len([n for n in nodes if n.id not in unhealthy]) < self.spec.node_count:
                backend.scheduler(cluster.spec).sync_health()  # a newer report may have passed them
                unhealthy = cluster.failed_health()
            healthy = [n.id for n in nodes if n.id not in unhealthy]
            if unhealthy and len(healthy) < self.spec.node_count:  # no node to wait for: it would never start
                raise UnhealthyNodesError(self.spec.node_count, unhealthy, healthy)
        if len(nodes) >= self.spec.node_count:
            return nodes
        down = {
            node_id: status.reasons.get(node_id, str(state))
            for node_id, state in status.node_states.items()
            if state is NodeState.UNUSABLE
        }
        if down and len(status.nodes) >= self.spec.node_count:
            count = len(down)
            raise NodeError(
                "submit",
                down,
                [n.id for n in nodes],
                summary=f"cannot submit job {self.name!r}: {count} of the cluster's "
                f"{len(status.nodes)} nodes {'is' if count == 1 else 'are'} unusable",
            )
        raise CapacityError(cluster.name, self.spec.node_count, len(nodes))

    def _prepare(self, cluster: Cluster, nodes: tuple[Node, ...]) -> LaunchTarget:
        backend = self.workspace.backend
        backend.prepare(cluster.spec, nodes)
        backend.prepare_job_mounts(cluster.spec, nodes, self.spec.mounts)
        return replace(backend.launch_target(cluster.spec, nodes), cluster_mounts=cluster.spec.mounts)

    def _reserve_name(self) -> None:
        """Create the job's folder atomically: the one submit that creates it owns the name."""
        share = self.workspace.share
        try:
            share.mkdir_new(self.paths.job_dir)
        except FileExistsError:
            raise AlreadyExistsError(
                "job",
                self.name,
                f"experiment {self.experiment.name!r}",
                f"attach with experiment.get_job({self.name!r}), choose another name, or pass exist_ok=True",
            ) from None
        except OSError as exc:
            raise ShareError(
                f"could not create the job's folder on share {share.name!r}: {exc}", self.paths.job_dir
            ) from exc

    def _stage(
        self,
        target: LaunchTarget,
        local_script: Path | None,
        script_rel: str | None,
        *,
        evictable: bool = False,
    ) -> dict[str, str]:
        """Upload the script, write launch.json, the queued status and the job record (``stage_job``);
        returns the secret values, which go to the scheduler and never to the share."""
        from ._staging import stage_job

        self._record = stage_job(self, target, local_script, script_rel, evictable=evictable)
        return {k: self.spec.environment[k] for k in self.spec.secret_environment}

    def _start(self, cluster: Cluster, nodes: tuple[Node, ...], secrets: dict[str, str]) -> None:
        request = JobRequest(
            experiment=self.experiment.name,
            name=self.name,
            node_count=self.spec.node_count,
            launch_config=join(self.paths.run_dir, LAUNCH_CONFIG),
            max_wall_clock_seconds=self.spec.max_wall_clock_seconds,
            created=str((self._record or {}).get("creation_time")),
            hang_timeout=self.spec.watchdog_seconds,
            hang_notice=self.spec.notice_seconds,
            max_retries=self.spec.max_retries,
            retry_on_exit_codes=tuple(self.spec.retry_on_exit_codes),
            max_cost=self.spec.max_cost,
            price_per_node_hour=self._price(cluster) if self.spec.max_cost is not None else None,
            scheduling_priority=self.spec.scheduling_priority,
            secrets=secrets,
            mounts=self.spec.mounts,
        )
        # the nodes just found are the cluster's (with autoscale they are the pool's: it finds its own)
        known = nodes if cluster.spec.autoscale is None else None
        self.workspace.backend.scheduler(cluster.spec, nodes=known).submit(request)

    @staticmethod
    def _price(cluster: Cluster) -> float:
        """The price per node-hour ``max_cost`` is measured with; an unknown price cannot bound a cost."""
        price = cluster.price_per_hour
        if price is None:
            raise ValidationError(
                "max_cost",
                "set",
                f"a known price for cluster {cluster.name!r} (pass create_cluster(price_per_hour=...))",
            )
        return float(price.value)

    def _unstage(self) -> None:
        """Remove what a failed submit wrote (its own folder only: the name is free again). A folder whose
        status a scheduler has written is that scheduler's job (its request was accepted, whatever reply
        this client saw): it is never removed from under it."""
        self._record = None
        try:
            status = self.workspace.share.read_json_or_none(self.paths.status) or {}
        except Exception:  # the submit's own error is the one to raise
            status = {}
        if isinstance(status, dict) and StatusDoc.from_dict(status).accepted:
            log.warning(
                "job %s/%s was accepted by its scheduler: its folder is kept", self.experiment.name, self.name
            )
            return
        try:
            self.workspace.share.delete(self.paths.job_dir, recursive=True)
        except Exception:
            log.warning("could not remove %s after a failed submit", self.paths.job_dir)

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
            for line in self.stream(name, follow=True, poll_interval=poll_interval, timeout=timeout):
                print(line, file=stream)
        started = time.monotonic()
        next_check = started + STALE_AFTER
        with _progress.status(f"job {self.name}", False if show_output else show_progress) as update:
            while True:
                status = self.status
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
