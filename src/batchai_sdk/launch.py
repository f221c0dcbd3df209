"""Pure builders for starting a job: rank layout, Batch AI's environment variables, the mpirun line,
the launcher's launch configuration and the commands that run node code. No I/O here: every function is
tested on its exact output.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._layout import JobPaths
from ._models import JobSpec, Node, Toolkit
from ._mount_paths import job_root_is_share
from .exceptions import ValidationError
from .mounts import Mount, describe, storage_key
from .node.policy import flight, toolkits
from .node.protocol.launch import LaunchConfig, MountLink
from .node.protocol.paths import LAUNCH_CONFIG

__all__ = [
    "RUN_ID_VARIABLE",
    "job_environment",
    "launch_config",
    "mpirun_argv",
    "node_command",
    "on_node",
    "ranks_per_node",
    "toolkit_settings_for_launch",
]

RUN_ID_VARIABLE = "AZ_BATCHAI_JOB_RUN_ID"  # the job's run: the same id in each of its attempts

ALWAYS_EXPORTED = (
    "BATCHAI_RANK_NODES",
    "BATCHAI_JOB_NODES",
    "BATCHAI_JOB_TAG",
    "AZ_BATCHAI_JOB_RESTART_COUNT",
    "BATCHAI_NODE_ADDRESSES",
    "BATCHAI_MASTER_PORT",
    "PYTHONUNBUFFERED",
    "OMPI_ALLOW_RUN_AS_ROOT",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
)


@dataclass(frozen=True)
class LaunchTarget:
    """What a job's launch needs to know about its cluster's nodes (a backend makes it: ``launch_target``)."""

    nodes: tuple[Node, ...]
    node_share_root: str  # where every node sees the workspace share's root
    mount_root: str  # AZ_BATCHAI_MOUNT_ROOT: the share is at <mount_root>/<share name>
    temp_root: str  # node-local directory under which AZ_BATCHAI_JOB_TEMP is made
    python: str = "python3"  # the interpreter on the nodes
    mpirun: str = "mpirun"
    # How the head node runs a command on another node (argv prefix; the command follows as one
    # argument). None: every node is this machine, commands run directly.
    ssh_command: tuple[str, ...] | None = None
    mpi_args: tuple[str, ...] = ()  # backend-specific mpirun options (mca parameters, rsh agent)
    env: Mapping[str, str] = field(default_factory=dict)  # exported to every rank and to job preparation
    num_gpus: int = 0  # per node: AZ_BATCHAI_NUM_GPUS
    oversubscribe: bool = False  # more ranks than cores is expected (the local backend's slots)
    # where the nodes see each storage a job mounts (backend's storage root / mounts.storage_key); None:
    # the backend mounts nothing per job (then a job's mounts are the cluster's, by storage)
    storage_root: str | None = None
    cluster_mounts: tuple[Mount, ...] = ()  # the cluster's mounts, at <mount_root>/<relative_mount_path>


def ranks_per_node(node_count: int, process_count: int | None) -> list[int]:
    """One rank per node by default; ``process_count`` ranks spread evenly, first nodes first."""
    return toolkits.ranks_per_node(node_count, node_count if process_count is None else process_count)


def on_node(target: LaunchTarget, share_path: str) -> str:
    return posixpath.join(target.node_share_root, share_path) if share_path else target.node_share_root


def node_temp_dir(target: LaunchTarget, spec: JobSpec) -> str:
    return posixpath.join(target.temp_root, spec.experiment, spec.name)


def job_environment(
    spec: JobSpec, target: LaunchTarget, paths: JobPaths, *, share_name: str, run_id: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """Batch AI's variables plus the job's own (secrets excluded), and the names whose values the node
    expands (input directories may be written with ``$AZ_BATCHAI_...``). ``run_id``: the job's
    ``AZ_BATCHAI_JOB_RUN_ID``, one per job and the same in every attempt (launch.json is written once, at
    submit), for a tracker's resume by id (docs/training.md#one-run-per-job)."""
    temp = node_temp_dir(target, spec)
    job_mount_root = target.node_share_root if job_root_is_share(spec) else posixpath.join(temp, "mounts")
    env: dict[str, str] = {
        "AZ_BATCHAI_MOUNT_ROOT": target.mount_root,
        "AZ_BATCHAI_JOB_MOUNT_ROOT": job_mount_root,
        "AZ_BATCHAI_JOB_TEMP": posixpath.join(temp, "tmp"),
        # Batch AI: "the root directory of all temporary job directories"
        "AZ_BATCHAI_JOB_TEMP_DIR": target.temp_root,
        "AZ_BATCHAI_SHARED_JOB_TEMP": on_node(target, posixpath.join(paths.job_dir, "shared_tmp")),
        "AZ_BATCHAI_STDOUTERR_DIR": on_node(target, paths.stdouterr),
        "AZ_BATCHAI_MPI_HOST_FILE": on_node(target, posixpath.join(paths.run_dir, "hostfile")),
        "AZ_BATCHAI_NUM_GPUS": str(target.num_gpus),
        "AZ_BATCHAI_JOB_NAME": spec.name,
        "AZ_BATCHAI_EXPERIMENT_NAME": spec.experiment,
        "PYTHONUNBUFFERED": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    if run_id is not None:
        env[RUN_ID_VARIABLE] = run_id
    env.update(mca_environment(target.mpi_args))
    env.update(target.env)
    expand: list[str] = []
    for in_id, path in spec.input_directories.items():
        env[f"AZ_BATCHAI_INPUT_{in_id}"] = path
        expand.append(f"AZ_BATCHAI_INPUT_{in_id}")
    for out_id, share_path in paths.outputs.items():
        env[f"AZ_BATCHAI_OUTPUT_{out_id}"] = on_node(target, share_path)
    if spec.toolkit is Toolkit.PYTORCH:  # PyTorch's flight recorder, for the hang verdict (docs/survive.md)
        env[flight.BUFFER_VARIABLE] = flight.BUFFER_SIZE  # the job's own environment may set it, 0: off
    for key, value in spec.environment.items():
        if key not in spec.secret_environment:
            env[key] = value
            if "$" in value:
                expand.append(key)
    return env, expand


def mca_environment(mpi_args: Sequence[str]) -> dict[str, str]:
    """``OMPI_MCA_<name>`` for each ``--mca <name> <value>`` of the backend's mpirun options: a job that
    starts its own mpirun (a custom toolkit's ``mpirun --hostfile $AZ_BATCHAI_MPI_HOST_FILE``) reaches the
    nodes the way ours does (on SSH clusters: the cluster's ssh config), as Batch AI's nodes let it."""
    out: dict[str, str] = {}
    for i, arg in enumerate(mpi_args[:-2]):
        if arg in ("--mca", "-mca"):
            out[f"OMPI_MCA_{mpi_args[i + 1]}"] = mpi_args[i + 2]
    return out


def mpirun_argv(
    target: LaunchTarget,
    *,
    processes: int,
    hostfile: str,
    export: list[str],
    rank_command: list[str],
) -> list[str]:
    """The mpirun line: ranks filled slot by slot over the hostfile, no core binding, the env exported."""
    argv = [
        target.mpirun,
        "-np",
        str(processes),
        "--hostfile",
        hostfile,
        "-bind-to",
        "none",
        "-map-by",
        "slot",
    ]
    if target.oversubscribe:
        argv.append("--oversubscribe")
    argv.extend(target.mpi_args)
    for name in sorted(set(export)):
        argv += ["-x", name]
    return argv + rank_command


def launch_config(
    spec: JobSpec,
    target: LaunchTarget,
    paths: JobPaths,
    *,
    share_name: str,
    script_on_node: str | None,
    node_main: str,
    run_id: str | None = None,
) -> LaunchConfig:
    """The launcher's launch.json. No secret values: only their names, which mpirun exports from the
    launcher's environment (the scheduler keeps the values on the head node)."""
    env, expand = job_environment(spec, target, paths, share_name=share_name, run_id=run_id)
    run_dir = on_node(target, paths.run_dir)
    config_path = posixpath.join(run_dir, LAUNCH_CONFIG)
    hostfile = posixpath.join(run_dir, "hostfile")
    settings = toolkit_settings_for_launch(spec)
    world = toolkits.process_count(spec.toolkit.value, settings, spec.node_count, target.num_gpus)
    ranks = toolkits.ranks_per_node(spec.node_count, world)
    python = spec.python_interpreter or target.python
    temp = node_temp_dir(target, spec)
    mount_link = (
        MountLink(
            path=posixpath.join(temp, "mounts", spec.mount_path.strip("/")), target=target.node_share_root
        )
        if spec.mount_path
        else None
    )
    export = [*env, *spec.secret_environment, *ALWAYS_EXPORTED]
    links = job_mount_links(spec, target)
    return LaunchConfig(
        job=f"{spec.experiment}/{spec.name}",
        toolkit=spec.toolkit.value,
        python=python,
        script=script_on_node,
        args=list(spec.args),
        command_line=spec.command_line,
        job_preparation=spec.job_preparation,
        container_image=spec.container_image,
        container_python=spec.python_interpreter or "python",
        node_count=spec.node_count,
        toolkit_settings=settings,
        gpus_per_node=target.num_gpus,
        max_wall_clock_seconds=spec.max_wall_clock_seconds,
        health_check=spec.health_check,
        status_path=on_node(target, paths.status),
        ranks_per_node=ranks,
        head=target.nodes[0].id,
        env=env,
        expand_env=expand,
        secret_names=sorted(spec.secret_environment),
        mount_link=mount_link,
        mount_links=links,
        ssh_command=list(target.ssh_command) if target.ssh_command is not None else None,
        share_root=target.node_share_root,
        run_dir=run_dir,
        stdouterr_dir=on_node(target, paths.stdouterr),
        wd=on_node(target, paths.wd),
        hostfile=hostfile,
        mpirun_argv=mpirun_argv(
            target,
            processes=sum(ranks),
            hostfile=hostfile,
            export=export,
            rank_command=[python, "-S", node_main, "rank", config_path],
        ),
    )


def job_mount_links(spec: JobSpec, target: LaunchTarget) -> list[MountLink]:
    """The links the rank shim makes on each node: ``$AZ_BATCHAI_JOB_MOUNT_ROOT/<relative_mount_path>`` →
    where the node sees that storage: the cluster's mount of the same storage, else the backend's storage
    root (``Backend.prepare_job_mounts`` made it visible there)."""
    root = posixpath.join(node_temp_dir(target, spec), "mounts")
    by_storage = {
        storage_key(m): posixpath.join(target.mount_root, m.relative_mount_path)
        for m in target.cluster_mounts
    }
    links = []
    for mount in spec.mounts:
        key = storage_key(mount)
        if key in by_storage:
            where = by_storage[key]
        elif target.storage_root is not None:
            where = posixpath.join(target.storage_root, key)
        else:
            raise ValidationError("mounts", describe(mount), "storage the cluster mounts")
        links.append(MountLink(path=posixpath.join(root, mount.relative_mount_path), target=where))
    return links


def node_command(python: str, node_main: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The shell command that runs the node code (``python -S node_main ARGS``), every part quoted.

    ``-S``: the node code needs only the standard library, and starts in half the time without site.
    """
    prefix = ""
    if env:
        prefix = "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(env.items())) + " "
    return prefix + " ".join(shlex.quote(a) for a in (python, "-S", node_main, *args))


def toolkit_settings_for_launch(spec: JobSpec) -> dict[str, Any]:
    """``launch.json["toolkit_settings"]``: the settings ``node.policy.toolkits`` reads on the nodes
    (``RankContext.settings``, ``process_count``, ``backend_notice``) — the spec's ``toolkit_settings``
    plus ``process_count`` when the job sets it. Plain JSON; no secrets (settings hold none)."""
    return spec.launch_settings()
