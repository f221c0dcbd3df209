"""A job handle: submit, follow and fetch. Everything it reads comes from the share, so any process
can re-attach with ``experiment.get_job(name)`` while the job runs on its own."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from . import _layout as layout
from . import _progress
from ._display import waiting_line
from ._job_files import confined, list_confined
from ._layout import JobPaths, share_relative
from ._models import (
    JobSpec,
    JobState,
    JobStatus,
    Node,
    NodeState,
    heartbeat_timeout,
    utcnow,
    validate_name,
)
from ._staging import code_files, resolve_local_script, stage_code
from .backends.base import ClusterScheduler, JobRequest, LaunchTarget
from .backends.head_scheduler import ensure_node_code, with_cluster_heartbeat
from .cost import format_cost
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
from .launch import launch_config, on_node
from .node.protocol import LAUNCH_CONFIG, StatusDoc
from .share import join

if TYPE_CHECKING:
    from ._models import FileInfo
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
        self._record = dict(record) if record else None
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
        from .batchai_json import parse_job_json

        spec = parse_job_json(
            source,
            name=name,
            experiment=experiment.name,
            cluster=cluster if isinstance(cluster, str) else cluster.name,
            storage_account=storage_account,
            storage_key=storage_key,
        )
        return experiment.job_from_spec(spec)

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
        if self.spec.node_count > cluster.max_nodes:
            auto = cluster.spec.autoscale is not None
            raise CapacityError(cluster.name, self.spec.node_count, cluster.max_nodes, autoscale=auto)
        if not self.spec.toolkit.runs_command_line and self.spec.python_script:
            return (cluster, *self._script_source())
        return cluster, None, None

    def _script_source(self) -> tuple[Path | None, str | None]:
        """(local file to upload, share path of a script already on the share); one of them is set."""
        script = self.spec.python_script or ""
        share = self.workspace.share
        if self.spec.source_dir is not None:
            return self._source_dir_script(), None
        if "$" in script:
            rel = share_relative(script, mount_path=self.spec.mount_path, share_name=share.name)
            if rel is not None and not share.exists(rel):
                raise NotFoundError("script", script, f"share {share.name!r} (looked for {rel!r})")
            return None, rel
        local = resolve_local_script(script)
        if local is None:
            raise NotFoundError("script", script, "this machine (a file path or an importable module name)")
        return local, None

    def _source_dir_script(self) -> Path:
        """The script inside ``source_dir``, the folder checked (size, links) before anything is uploaded."""
        root = Path(self.spec.source_dir or "").expanduser()
        if not root.is_dir():
            raise ValidationError("source_dir", self.spec.source_dir, "a folder on this machine")
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
            raise NodeError("submitting the job: node(s) unusable", down, [n.id for n in nodes])
        raise CapacityError(cluster.name, self.spec.node_count, len(nodes))

    def _prepare(self, cluster: Cluster, nodes: tuple[Node, ...]) -> LaunchTarget:
        backend = self.workspace.backend
        backend.prepare(cluster.spec, nodes)
        return backend.launch_target(cluster.spec, nodes)

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
        """Upload the script, write launch.json, the queued status and the job record; returns the
        secret values, which go to the scheduler and never to the share."""
        share = self.workspace.share
        what = "the job's script"
        try:
            if self.spec.source_dir is not None and local_script is not None:  # the whole folder, one tree
                stage_code(share, Path(self.spec.source_dir).expanduser(), self.paths.wd)
                script_rel = join(self.paths.wd, self.spec.python_script or "")
            elif local_script is not None:
                script_rel = share.upload(local_script, join(self.paths.wd, local_script.name))
            else:
                share.mkdir(self.paths.wd)
            script_on_node = (
                on_node(target, script_rel) if script_rel is not None else self.spec.python_script
            )
            what = "the job's folders"
            for directory in (
                self.paths.stdouterr,
                *self.paths.outputs.values(),
                join(self.paths.job_dir, "shared_tmp"),
            ):
                share.mkdir(directory)
            what = "the node code"
            node_main = on_node(target, join(ensure_node_code(self.workspace.backend), "__main__.py"))
            config = launch_config(
                self.spec,
                target,
                self.paths,
                share_name=share.name,
                script_on_node=script_on_node,
                node_main=node_main,
            )
            config["eviction_watch"] = evictable  # Spot / low priority: each node watches for notices
            config["notes"] = self.workspace.backend.guard_host(config)
            for note in config["notes"]:
                log.warning("job %s: %s", self.name, note)
            what = "the job's launch configuration"
            share.write_json(join(self.paths.run_dir, LAUNCH_CONFIG), config)
            created = utcnow().isoformat()
            what = "the job's status record"
            share.write_json(self.paths.status, {"state": "queued", "creation_time": created})
            record = {
                "spec": self.spec.to_dict(redact=True),
                "paths": self.paths.to_dict(),
                "backend": self.workspace.backend.kind,
                "script_on_node": script_on_node,
                "creation_time": created,
            }
            what = "the job record"
            share.write_json(self.paths.record, record)
        except (OSError, ShareError) as exc:
            raise ShareError(
                f"could not write {what} to share {share.name!r}: {exc}", self.paths.job_dir
            ) from exc
        self._record = record
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
            max_retries=self.spec.max_retries,
            retry_on_exit_codes=tuple(self.spec.retry_on_exit_codes),
            max_cost=self.spec.max_cost,
            price_per_node_hour=self._price(cluster) if self.spec.max_cost is not None else None,
            secrets=secrets,
        )
        self.workspace.backend.scheduler(cluster.spec).submit(request)

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
        if self.workspace.backend.kind == "slurm":  # Slurm's own queue says what our records cannot
            self._scheduler().refresh(self.experiment.name, self.name)
        record = self.workspace.share.read_json_or_none(self.paths.status)
        record = with_cluster_heartbeat(self.workspace.share, self.spec.cluster, record)
        status = JobStatus.from_record(record, timeout=heartbeat_timeout())
        return self._confirm_lost(status, record or {}) if status.lost else status

    def _confirm_lost(self, status: JobStatus, record: Mapping[str, Any]) -> JobStatus:
        """A stale record is only a hint (a full share stops the scheduler's writes, not its work): the
        job is lost only when its scheduler cannot be reached or no longer knows it. One it knows keeps
        its state; one that ended there reads as it ended, before the share takes the record."""
        try:
            known = self._scheduler().job_state(self.experiment.name, self.name, timeout=30)
        except BatchAIError as exc:
            log.debug("could not ask the scheduler about %s: %s", self.name, exc)
            return status
        if not known:
            return status
        if not known.get("found"):  # its scheduler answers and does not know it: lost for good
            self._record_lost(status, record)
            return status
        fresh: dict[str, Any] = dict(record)
        fresh.update(
            {k: known[k] for k in ("state", "exit_code", "failure_reason", "end_time") if k in known}
        )
        return JobStatus.from_record(fresh)

    def _record_lost(self, status: JobStatus, record: Mapping[str, Any]) -> None:
        """Write the lost job's end, so that it reads the same from then on (a final state is final)."""
        ended = {
            **record,
            "state": "failed",
            "failure_reason": status.failure_reason,
            "end_time": utcnow().isoformat(),
        }
        try:
            self.workspace.share.write_json(self.paths.status, ended)
        except (OSError, BatchAIError) as exc:
            log.debug("could not record the end of lost job %s: %s", self.name, exc)

    @property
    def attempts(self) -> list[dict[str, Any]]:
        """Each ended attempt of the job, oldest first: index, start, end, nodes, cause, exit_code, reason
        and log_dir (its logs' folder under the job's stdouterr, once a later attempt replaced them)."""
        self._require_submitted()
        record = self.workspace.share.read_json_or_none(self.paths.status) or {}
        return list(record.get("attempts") or [])

    @property
    def state(self) -> JobState:
        """The job's current ``JobState`` (``status.state``)."""
        return self.status.state

    @property
    def exit_code(self) -> int | None:
        """The job's exit code once it has ended (None before)."""
        return self.status.exit_code

    @property
    def cost(self) -> float | None:
        """Estimated cost so far (price per node-hour × nodes × hours run); None when unknown."""
        from .cost import cost_of_job

        return cost_of_job(self)

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
                        f"job {self.name!r} to end (state {status.state})", timeout or 0
                    )
                if time.monotonic() > next_check and _stale(status):
                    self._revive_scheduler()
                    next_check = time.monotonic() + STALE_AFTER
                update(waiting_line(status))  # the job's own time in its state
                time.sleep(poll_interval)
        if raise_on_failure and status.state is not JobState.SUCCEEDED:
            raise JobFailedError(self.name, status.state.value, status.exit_code, status.failure_reason)
        return status.state

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
            return self._end_lost_job()
        if not wait:
            return self.state
        return self.wait(timeout=timeout, poll_interval=0.25)

    def _end_lost_job(self) -> JobState:
        """Record as terminated a job its scheduler no longer knows (lost with its head node)."""
        share = self.workspace.share
        record = dict(share.read_json_or_none(self.paths.status) or {})
        lost = JobStatus.from_record(record, timeout=heartbeat_timeout())
        if lost.state.ended and not lost.lost:
            return lost.state
        why = lost.failure_reason or "its cluster's scheduler no longer knew it"
        record.update(
            state="terminated",
            end_time=utcnow().isoformat(),
            failure_reason=f"terminated by the user after {why}",
        )
        share.write_json(self.paths.status, record)
        return JobState.TERMINATED

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

    def files(self, path: str = "", *, directory: str | None = None) -> list[FileInfo]:
        """The job's files (name, type, size, modified): its logs by default, or an output directory's."""
        self._require_submitted()
        return list_confined(self.workspace.share, join(self._dir(directory), path), self.file_roots(), path)

    def dir_argument(self) -> str | None:
        """The share path of the folder the job's ``--dir`` argument names (the training module's output
        folder, as in the tutorial), or None when it has none on the share."""
        words = list(self.spec.args)
        if len(words) == 1 and " " in words[0]:
            words = shlex.split(words[0])
        value = None
        for i, word in enumerate(words):
            if word in ("--dir", "-d") and i + 1 < len(words):
                value = words[i + 1]
            elif word.startswith("--dir="):
                value = word.split("=", 1)[1]
        if value is None:
            return None
        for var in ("$AZ_BATCHAI_STDOUTERR_DIR", "${AZ_BATCHAI_STDOUTERR_DIR}"):
            if value == var or value.startswith(var + "/"):
                return join(self.paths.stdouterr, value[len(var) + 1 :])
        return share_relative(value, mount_path=self.spec.mount_path, share_name=self.workspace.share.name)

    def file_roots(self) -> list[str]:
        """Where job files are looked up by name, in order: the logs, the output directories, ``--dir``."""
        roots = [self.paths.stdouterr, *self.paths.outputs.values()]
        out_dir = self.dir_argument()
        if out_dir is not None and out_dir not in roots:
            roots.append(out_dir)
        return roots

    def _locate(self, name: str, directory: str | None) -> str:
        share = self.workspace.share
        if directory is not None:
            return join(self._dir(directory), name)
        for candidate in self.file_roots():
            if share.exists(join(candidate, name)):
                return join(candidate, name)
        return join(self.paths.stdouterr, name)

    def stream(
        self,
        name: str = "stdout.txt",
        *,
        follow: bool = True,
        directory: str | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
    ) -> Iterator[str]:
        """Yield the lines of a job file as they are written (without their newline).

        With ``follow`` it waits for the file to appear and grow, and ends once the job has ended and
        the file is drained; each poll reads only the bytes added since the last one.
        """
        self._require_submitted()
        share = self.workspace.share
        path = self._locate(name, directory)
        offset = 0
        pending = b""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ended = self.state.ended if follow else True
            info = share.stat(path)
            if info is None:
                if ended:
                    if follow:
                        return
                    raise NotFoundError("file", name, f"job {self.name!r}")
            elif (info.size or 0) < offset:  # a requeued attempt started the file anew
                offset, pending = 0, b""
                continue
            elif (info.size or 0) > offset:
                confined(share, path, self.file_roots(), name)  # checked at each read: a link may come later
                chunk = share.read_bytes(path, offset, (info.size or 0) - offset)
                offset += len(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace").rstrip("\r")
                continue  # the file may still be growing: read again before sleeping
            if ended:
                if pending:
                    yield pending.decode("utf-8", errors="replace").rstrip("\r")
                return
            if deadline is not None and time.monotonic() > deadline:
                raise BatchAITimeoutError(f"job {self.name!r} file {name!r}", timeout or 0)
            time.sleep(poll_interval)

    def tail(self, name: str = "stdout.txt", lines: int = 20, *, directory: str | None = None) -> list[str]:
        """The last ``lines`` lines of a job file (reads only its end)."""
        self._require_submitted()
        share = self.workspace.share
        path = confined(share, self._locate(name, directory), self.file_roots(), name)
        size = share.size(path)
        window = 8192
        while True:
            start = max(0, size - window)
            data = share.read_bytes(path, start, size - start)
            text = data.decode("utf-8", errors="replace").splitlines()
            if start == 0 or len(text) > lines:
                return list(deque(text if start == 0 else text[1:], maxlen=lines))
            window *= 4

    def download(
        self, name: str, dest: str | os.PathLike[str] = ".", *, directory: str | None = None
    ) -> Path:
        """Download a job file (or folder) to ``dest``. Names are looked up in the logs, then in each
        output directory, then in the folder of the job's ``--dir`` argument, unless ``directory`` says
        where."""
        self._require_submitted()
        share = self.workspace.share
        return share.download(confined(share, self._locate(name, directory), self.file_roots(), name), dest)

    # -- training metrics -------------------------------------------------------------------------------
    def metrics(self, path: str | None = None) -> Any:
        """The training module's per-epoch records (metrics.jsonl): a DataFrame if pandas is installed,
        else a list of dicts. ``path`` is the share path of metrics.jsonl; by default it is looked for
        next to the model in the job's ``--dir`` argument, then in the logs and output directories."""
        from ._metrics import load_metrics

        return load_metrics(self, path)

    def plot_metrics(self, path: str | None = None) -> Any:
        """A matplotlib Figure of loss and accuracy per epoch (training and validation), from the training
        module's ``metrics.jsonl``; ``path`` picks another file. Needs the ``notebook`` extra."""
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
            "nodes": list(st.nodes),
            "stdOutErrPath": self.paths.stdouterr,
            "attempts": self.attempts if self.submitted else [],
            "cost": format_cost(self.cost) if self.submitted else "unknown",
        }

    def __repr__(self) -> str:
        state = self.state.value if self.submitted else "not submitted"
        return f"Job({self.experiment.name}/{self.name}, {state})"

    def _repr_html_(self) -> str:
        from ._display import job_html

        return job_html(self)
