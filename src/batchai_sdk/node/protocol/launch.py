"""A job's launch configuration (``run/launch.json``): what ``Job.submit`` stages (``launch.launch_config``,
then ``_staging``) and the launcher, the rank shims, the pre-started world, the Slurm step and the Batch
and Slurm schedulers read. A ``TypedDict``: it travels as JSON, and mypy checks every key read at both
ends. No secret values: only their names (``secret_names``)."""

from __future__ import annotations

from typing import Any, TypedDict, TypeVar

from .cluster import NodeConfig

T = TypeVar("T")


class MountLink(TypedDict):
    """A link the rank shim makes on each node: ``path`` -> ``target``."""

    path: str
    target: str


class _Staged(TypedDict):
    job: str  # experiment/name
    toolkit: str  # names a policy/toolkits entry
    python: str  # the interpreter the ranks run
    script: str | None  # the script on the node, where the job runs one
    args: list[str]
    command_line: str | None  # custom / custommpi
    job_preparation: str | None  # run on every node before the ranks
    container_image: str | None
    container_python: str
    node_count: int
    toolkit_settings: dict[str, Any]  # the toolkit's own settings (parameter server count, ...)
    gpus_per_node: int
    max_wall_clock_seconds: float | None
    health_check: str | None  # the job's own gate level, right before it starts
    status_path: str  # its status.json, as the nodes mount the share
    ranks_per_node: list[int]
    head: str  # the head node's id
    env: dict[str, str]  # Batch AI's variables and the job's own (no secrets)
    expand_env: list[str]  # the names whose values the node expands ($VARS)
    secret_names: list[str]  # exported by mpirun from the launcher's environment
    mount_link: MountLink | None  # the job's mount_path -> the share
    mount_links: list[MountLink]  # $AZ_BATCHAI_JOB_MOUNT_ROOT/<relative_mount_path> -> the storage
    ssh_command: list[str] | None  # how the head node reaches the others (None: all on this machine)
    share_root: str
    run_dir: str
    stdouterr_dir: str
    wd: str
    hostfile: str
    mpirun_argv: list[str]


class LaunchConfig(_Staged, total=False):
    """``launch.json``: the keys ``launch.launch_config`` writes, and those ``Job.submit`` adds."""

    eviction_watch: bool  # Spot / low priority: each node watches for notices
    requirements: dict[str, Any]  # _requirements.Requirements.node_config: the job's venv
    notes: list[str]  # what the backend left out of the configuration (guard_host), and why


# -- a launcher's node-local job folder (paths.ASSIGNMENT_RECORD, PHASE_RECORD, RESULT_RECORD) -------------
class Assignment(TypedDict):
    """What the scheduler gives a launcher before it starts (``assignment.json``)."""

    launch: str  # the job's launch.json, as the head node mounts the share
    nodes: list[NodeConfig]  # the job's nodes, the head first
    tag: str  # this attempt's process tag
    attempt: int
    node_main: str  # the node code's entry point (this version's)


class Phase(TypedDict):
    """The mark a launcher leaves as it goes (``phase.json``): recovery tells a begun attempt by its tag."""

    phase: str  # preparing, running
    pid: int
    tag: str | None


class Result(TypedDict, total=False):
    """A launcher's outcome (``result.json``), in its node-local folder and in the run folder on the share;
    the share's copy counts only with this attempt's ``tag``."""

    exit_code: int | None  # None: the ranks never ran or were ended
    reason: str | None  # why it failed
    stopped_by_signal: int | None  # the signal the scheduler sent to stop it
    tag: str | None


def read_result(doc: Any) -> Result | None:
    """A ``result.json`` as read (a file on the share is data): its fields of their types, a field of
    another type as None; None for anything that is not a record."""
    if not isinstance(doc, dict):
        return None
    out = Result()
    if "exit_code" in doc:
        out["exit_code"] = _int(doc["exit_code"])
    if "stopped_by_signal" in doc:
        out["stopped_by_signal"] = _int(doc["stopped_by_signal"])
    if "reason" in doc:
        out["reason"] = doc["reason"] if isinstance(doc["reason"], str) else None
    if "tag" in doc:
        out["tag"] = doc["tag"] if isinstance(doc["tag"], str) else None
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def given(value: T | None, field: str) -> T:
    """A launch.json field the job's toolkit implies (a script for Horovod, ``ssh_command`` on SSH
    nodes, ...): a clear error naming it where it is missing, not a ``None`` deep in a command line."""
    if value is None:
        raise ValueError(f"launch.json: {field} is missing, and this job needs it")
    return value
