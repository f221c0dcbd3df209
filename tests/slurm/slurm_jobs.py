"""Driving jobs through the Slurm scheduler in the tests: stage a job's files on the share as
``Job.submit`` does, hand the scheduler its ``JobRequest``, wait on the share's status record.

(Until the object model submits through ``backend.scheduler(spec)``, the tests call the scheduler
directly with what submit would hand it.)
"""

from __future__ import annotations

import textwrap
import time
from typing import Any

from batchai_sdk._layout import JobPaths
from batchai_sdk._models import ClusterSpec, JobSpec, JobStatus, heartbeat_timeout, utcnow
from batchai_sdk._staging import ensure_node_code
from batchai_sdk.backends.base import JobRequest
from batchai_sdk.backends.slurm import SlurmBackend, SlurmScheduler
from batchai_sdk.launch import launch_config, on_node
from batchai_sdk.share import join
from batchai_sdk.workspace import Workspace

CLUSTER = ClusterSpec(name="cpu", vm_size="slurm", nodes=1)


def scheduler(ws: Workspace) -> SlurmScheduler:
    assert isinstance(ws.backend, SlurmBackend)
    return ws.backend.scheduler(CLUSTER)


def stage(ws: Workspace, spec: JobSpec, script: str | None = None) -> JobRequest:
    share, backend = ws.share, ws.backend
    paths = JobPaths.for_spec(spec, share.name)
    target = backend.launch_target(CLUSTER, backend.cluster_status(CLUSTER).nodes)
    for folder in (paths.stdouterr, paths.wd, paths.run_dir, join(paths.job_dir, "shared_tmp")):
        share.mkdir(folder)
    script_on_node = spec.python_script
    if script is not None:
        rel = join(paths.wd, "job.py")
        share.write_text(rel, textwrap.dedent(script))
        script_on_node = on_node(target, rel)
    node_main = on_node(target, join(ensure_node_code(backend.share), "__main__.py"))
    config = launch_config(
        spec, target, paths, share_name=share.name, script_on_node=script_on_node, node_main=node_main
    )
    share.write_json(join(paths.run_dir, "launch.json"), config)
    share.write_json(paths.status, {"state": "queued", "creation_time": utcnow().isoformat()})
    return JobRequest(
        experiment=spec.experiment,
        name=spec.name,
        node_count=spec.node_count,
        launch_config=join(paths.run_dir, "launch.json"),
        max_wall_clock_seconds=spec.max_wall_clock_seconds,
        secrets={k: spec.environment[k] for k in spec.secret_environment},
    )


def submit(ws: Workspace, name: str, script: str | None = None, **spec: Any) -> JobRequest:
    options: dict[str, Any] = {"python_script": "job.py"} if script is not None else {}
    options.update(spec)
    request = stage(ws, JobSpec(name=name, experiment="exp", cluster=CLUSTER.name, **options), script)
    scheduler(ws).submit(request)
    return request


def status(ws: Workspace, name: str) -> JobStatus:
    """As a reader sees it: refreshed from Slurm, a job whose heartbeat stopped taken for lost."""
    record = scheduler(ws).refresh("exp", name)
    return JobStatus.from_record(record, timeout=heartbeat_timeout())


def wait(ws: Workspace, name: str, *, timeout: float = 60, until: str | None = None) -> JobStatus:
    """Until the job has ended (or reached state ``until``); the last status."""
    deadline = time.monotonic() + timeout
    while True:
        st = status(ws, name)
        if (st.state.value == until) if until else st.state.ended:
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"job {name} still {st.state} after {timeout:g}s")
        time.sleep(0.3)


def read(ws: Workspace, name: str, file: str) -> str:
    return ws.share.read_text(join(".batchai/experiments/exp/jobs", name, "stdouterr", file))
