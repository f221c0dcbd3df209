"""What ``Job.submit`` writes to the share for its job (``stage_job``): the script or source_dir, the job's
folders, launch.json, the queued status and the job record. Code staging itself is ``_staging``'s."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._models import utcnow
from ._requirements import check_requirements
from ._staging import ensure_node_code, stage_code
from .exceptions import ShareError
from .launch import launch_config, on_node
from .node.protocol import LAUNCH_CONFIG
from .share import join

if TYPE_CHECKING:
    from .backends.base import LaunchTarget
    from .job import Job

log = logging.getLogger("batchai_sdk")


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
        share.write_json(job.paths.status, {"state": "queued", "creation_time": created})
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
