"""``Job.submit``'s steps after its checks (``_submit_checks``): pick the nodes, prepare them, reserve the
job's name, stage it, start it; a failed step unstages (the job's own folder only). ``stage_job`` writes
what the job needs on the share: the script or source_dir, its folders, launch.json, the queued status and
the job record. Code staging itself is ``_staging``'s."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._models import Node, NodeState, utcnow
from ._requirements import check_requirements
from ._staging import ensure_node_code, stage_code
from .backends.base import JobRequest
from .exceptions import (
    AlreadyExistsError,
    CapacityError,
    NodeError,
    ShareError,
    UnhealthyNodesError,
    ValidationError,
)
from .launch import launch_config, on_node
from .node.protocol.paths import LAUNCH_CONFIG
from .node.protocol.records import StatusDoc
from .share import join

if TYPE_CHECKING:
    from .backends.base import LaunchTarget
    from .cluster import Cluster
    from .job import Job

log = logging.getLogger("batchai_sdk")


def pick_nodes(job: Job, cluster: Cluster) -> tuple[Node, ...]:
    """The cluster's usable nodes; a typed error when too few of them are up for the job."""
    backend = job.workspace.backend
    if backend.queues_for_nodes:  # the service places the job once nodes exist
        return ()
    spec = cluster.spec
    scale_set = spec.autoscale is not None and backend.scale_set(spec) is not None
    if spec.autoscale is not None and not scale_set:
        spec = replace(spec, nodes=cluster.max_nodes)  # the scheduler grows into these for the job
    status = backend.cluster_status(spec)
    nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
    if len(nodes) < job.spec.node_count and scale_set:  # new VMs join once this client pins them
        cluster.grow_for(job.spec.node_count, why=f"job {job.experiment.name}/{job.name} submitted")
        status = backend.cluster_status(spec)
        nodes = tuple(n for n in status.nodes if n.id not in status.node_states)
    if len(nodes) >= job.spec.node_count and spec.autoscale is None:
        unhealthy = cluster.failed_health()
        if unhealthy and len([n for n in nodes if n.id not in unhealthy]) < job.spec.node_count:
            backend.scheduler(cluster.spec).sync_health()  # a newer report may have passed them
            unhealthy = cluster.failed_health()
        healthy = [n.id for n in nodes if n.id not in unhealthy]
        if unhealthy and len(healthy) < job.spec.node_count:  # no node to wait for: it would never start
            raise UnhealthyNodesError(job.spec.node_count, unhealthy, healthy)
    if len(nodes) >= job.spec.node_count:
        return nodes
    down = {
        node_id: status.reasons.get(node_id, str(state))
        for node_id, state in status.node_states.items()
        if state is NodeState.UNUSABLE
    }
    if down and len(status.nodes) >= job.spec.node_count:
        count = len(down)
        raise NodeError(
            "submit",
            down,
            [n.id for n in nodes],
            summary=f"cannot submit job {job.name!r}: {count} of the cluster's "
            f"{len(status.nodes)} nodes {'is' if count == 1 else 'are'} unusable",
        )
    raise CapacityError(cluster.name, job.spec.node_count, len(nodes))


def prepare(job: Job, cluster: Cluster, nodes: tuple[Node, ...]) -> LaunchTarget:
    backend = job.workspace.backend
    backend.prepare(cluster.spec, nodes)
    backend.prepare_job_mounts(cluster.spec, nodes, job.spec.mounts)
    return replace(backend.launch_target(cluster.spec, nodes), cluster_mounts=cluster.spec.mounts)


def reserve_name(job: Job) -> None:
    """Create the job's folder atomically: the one submit that creates it owns the name."""
    share = job.workspace.share
    try:
        share.mkdir_new(job.paths.job_dir)
    except FileExistsError:
        raise AlreadyExistsError(
            "job",
            job.name,
            f"experiment {job.experiment.name!r}",
            f"attach with experiment.get_job({job.name!r}), choose another name, or pass exist_ok=True",
        ) from None
    except OSError as exc:
        raise ShareError(
            f"could not create the job's folder on share {share.name!r}: {exc}", job.paths.job_dir
        ) from exc


def stage(
    job: Job,
    target: LaunchTarget,
    local_script: Path | None,
    script_rel: str | None,
    *,
    evictable: bool = False,
) -> dict[str, str]:
    """Upload the script, write launch.json, the queued status and the job record (``stage_job``);
    returns the secret values, which go to the scheduler and never to the share."""
    job._record = stage_job(job, target, local_script, script_rel, evictable=evictable)
    return {k: job.spec.environment[k] for k in job.spec.secret_environment}


def start(job: Job, cluster: Cluster, nodes: tuple[Node, ...], secrets: dict[str, str]) -> None:
    request = JobRequest(
        experiment=job.experiment.name,
        name=job.name,
        node_count=job.spec.node_count,
        launch_config=join(job.paths.run_dir, LAUNCH_CONFIG),
        max_wall_clock_seconds=job.spec.max_wall_clock_seconds,
        created=str((job._record or {}).get("creation_time")),
        hang_timeout=job.spec.watchdog_seconds,
        hang_notice=job.spec.notice_seconds,
        max_retries=job.spec.max_retries,
        retry_on_exit_codes=tuple(job.spec.retry_on_exit_codes),
        max_cost=job.spec.max_cost,
        price_per_node_hour=price(cluster) if job.spec.max_cost is not None else None,
        scheduling_priority=job.spec.scheduling_priority,
        secrets=secrets,
        mounts=job.spec.mounts,
    )
    # the nodes just found are the cluster's (with autoscale they are the pool's: it finds its own)
    known = nodes if cluster.spec.autoscale is None else None
    job.workspace.backend.scheduler(cluster.spec, nodes=known).submit(request)


def price(cluster: Cluster) -> float:
    """The price per node-hour ``max_cost`` is measured with; an unknown price cannot bound a cost."""
    price = cluster.price_per_hour
    if price is None:
        raise ValidationError(
            "max_cost",
            "set",
            f"a known price for cluster {cluster.name!r} (pass create_cluster(price_per_hour=...))",
        )
    return float(price.value)


def unstage(job: Job) -> None:
    """Remove what a failed submit wrote (its own folder only: the name is free again). A folder whose
    status a scheduler has written is that scheduler's job (its request was accepted, whatever reply
    this client saw): it is never removed from under it."""
    job._record = None
    try:
        status = job.workspace.share.read_json_or_none(job.paths.status) or {}
    except Exception:  # the submit's own error is the one to raise
        status = {}
    if isinstance(status, dict) and StatusDoc.from_dict(status).accepted:
        log.warning(
            "job %s/%s was accepted by its scheduler: its folder is kept", job.experiment.name, job.name
        )
        return
    try:
        job.workspace.share.delete(job.paths.job_dir, recursive=True)
    except Exception:
        log.warning("could not remove %s after a failed submit", job.paths.job_dir)


def stage_job(
    job: Job, target: LaunchTarget, local_script: Path | None, script_rel: str | None, *, evictable: bool
) -> dict[str, Any]:
    """Upload a job's script (or its source_dir), make its folders, write launch.json, the queued status
    and the job record (returned); a share that refuses a write is a ShareError naming what."""
    share = job.workspace.share
    what = "the job's script"
    try:
        if job.spec.source_dir is not None and local_script is not None:  # the whole folder, one tree
            stage_code(share, Path(job.spec.source_dir).expanduser(), job.paths.wd)
            script_rel = join(job.paths.wd, job.spec.python_script or "")
        elif local_script is not None:
            script_rel = share.upload(local_script, join(job.paths.wd, local_script.name))
        else:
            share.mkdir(job.paths.wd)
        script_on_node = on_node(target, script_rel) if script_rel is not None else job.spec.python_script
        what = "the job's folders"
        for directory in (
            job.paths.stdouterr,
            *job.paths.outputs.values(),
            join(job.paths.job_dir, "shared_tmp"),
        ):
            share.mkdir(directory)
        what = "the node code"
        node_main = on_node(target, join(ensure_node_code(share), "__main__.py"))
        config = launch_config(
            job.spec,
            target,
            job.paths,
            share_name=share.name,
            script_on_node=script_on_node,
            node_main=node_main,
            run_id=uuid.uuid4().hex,
        )
        config["eviction_watch"] = evictable  # Spot / low priority: each node watches for notices
        requirements = check_requirements(
            job.spec, job.workspace.backend.installs_requirements, job.workspace.backend.kind
        )
        if requirements is not None:  # installed by each node's preparation, into the job's venv
            where = (config["python"], target.temp_root, config["wd"])
            config["requirements"] = requirements.node_config(*where)
        config["notes"] = job.workspace.backend.guard_host(config)
        for note in config["notes"]:
            log.warning("job %s: %s", job.name, note)
        config["notes"] += job._mount_notes
        what = "the job's launch configuration"
        share.write_json(join(job.paths.run_dir, LAUNCH_CONFIG), config)
        created = utcnow().isoformat()
        what = "the job's status record"
        share.write_json(job.paths.status, StatusDoc(state="queued", creation_time=created).to_dict())
        record = {
            "spec": job.spec.to_dict(redact=True),
            "paths": job.paths.to_dict(),
            "backend": job.workspace.backend.kind,
            "script_on_node": script_on_node,
            "creation_time": created,
        }
        what = "the job record"
        share.write_json(job.paths.record, record)
    except (OSError, ShareError) as exc:
        raise ShareError(f"could not write {what} to share {share.name!r}: {exc}", job.paths.job_dir) from exc

    return record
