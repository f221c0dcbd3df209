"""A job as a Batch job with one multi-instance task: pure builders of their REST bodies and of the two
commands, and the mapping of Batch's task states to our job states.

Batch runs the **coordination command** on every node of the task (the primary included) and, once it
succeeded on all of them, the **application command** on the primary only, with ``AZ_BATCH_HOST_LIST``
(every node's address), ``AZ_BATCH_MASTER_NODE`` (``address:port``), ``AZ_BATCH_TASK_WORKING_DIR`` and
``AZ_BATCH_NODE_ID`` set. Here:

- the coordination command checks that the node sees the workspace share (the pool's mount) and makes
  the job's node-local folders — a node that cannot run the job fails the task before any rank starts;
- the application command is the job's launcher (``node/job/launcher.py``, the same one our head-node
  scheduler starts), given the nodes Batch chose: it runs job preparation on each node and then the
  exact launch line ``launch.py`` built (mpirun with the hostfile; torchrun's and TF_CONFIG's variables
  made per rank by ``node/policy/toolkits.py``). Ranks reach the other nodes over the SSH that Batch sets up
  between the nodes of a pool with inter-node communication for the pool's user.

Batch AI's variables come from Batch's: ``AZ_BATCHAI_MOUNT_ROOT`` is ``$AZ_BATCH_NODE_MOUNTS_DIR``, the
MPI host file is written from ``AZ_BATCH_HOST_LIST``, ``AZ_BATCHAI_TASK_INDEX``/rank variables come from
the launcher, and ``AZ_BATCHAI_JOB_RESTART_COUNT`` counts the attempts (a task requeued after a Spot
preemption runs again under the same job and task ids, and the training module resumes from its
checkpoint on the share).
"""

from __future__ import annotations

import math
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..._models import JobState
from ...node.protocol.paths import ASSIGNMENT_RECORD, RESULT_RECORD, SECRETS_RECORD
from .models import bm
from .pool import POOL_USER

TASK_ID = "job"
RESULT_NAME = "batch-result.json"  # the application command's outcome, on the share next to launch.json
ATTEMPTS_DIR = "batch-attempts"  # one folder per attempt, made with mkdir (the attempt counter)
MAX_PRIORITY = 1000  # Batch's job priority range is -1000..1000
TERMINATE_REASON = "batchai: terminated by the user"


def _spelled(script: str, **names: str) -> str:
    """``script`` with each ``@NAME@`` in it replaced by the file name it stands for."""
    for mark, name in names.items():
        script = script.replace(f"@{mark}@", name)
    return script


# Writes the launcher's assignment (the nodes Batch chose) and secrets, numbering the attempt on the
# share. Standard library only, run with ``python -S`` like all node code.
_PREPARE = _spelled(
    """
import json, os, sys
job_dir, config, node_main, run_dir = sys.argv[1:5]
hosts = [h for h in os.environ.get("AZ_BATCH_HOST_LIST", "").split(",") if h]
if not hosts:
    sys.exit("AZ_BATCH_HOST_LIST is empty: not a multi-instance task")
attempts = os.path.join(run_dir, "@ATTEMPTS@")
os.makedirs(attempts, exist_ok=True)
n = 0
while True:
    try:
        os.mkdir(os.path.join(attempts, str(n)))
        break
    except FileExistsError:
        n += 1
def dump(name, data, mode):
    path = os.path.join(job_dir, name)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)
nodes = [{"id": h, "address": h, "machine": h, "slots": 1} for h in hosts]
dump("@ASSIGNMENT@", {"launch": config, "nodes": nodes, "node_main": node_main, "attempt": n}, 0o644)
names = [k for k in os.environ.get("BATCHAI_SECRET_NAMES", "").split(",") if k]
dump("@SECRETS@", {k: os.environ[k] for k in names if k in os.environ}, 0o600)
try:
    os.unlink(os.path.join(job_dir, "@RESULT@"))
except FileNotFoundError:
    pass
""",
    ATTEMPTS=ATTEMPTS_DIR,
    ASSIGNMENT=ASSIGNMENT_RECORD,
    SECRETS=SECRETS_RECORD,
    RESULT=RESULT_RECORD,
)

# Copies the launcher's result to the share and exits with the job's exit code (Batch's task exit code).
_FINISH = _spelled(
    """
import json, os, sys
job_dir, run_dir = sys.argv[1:3]
try:
    with open(os.path.join(job_dir, "@RESULT@")) as f:
        result = json.load(f)
except (OSError, ValueError):
    result = {"exit_code": None, "reason": "the job's launcher left no result"}
try:
    with open(os.path.join(job_dir, "@ASSIGNMENT@")) as f:
        assignment = json.load(f)
except (OSError, ValueError):
    assignment = {}
result["attempt"] = assignment.get("attempt")
result["nodes"] = [n["id"] for n in assignment.get("nodes") or ()]
path = os.path.join(run_dir, "@SHARE_RESULT@")
with open(path + ".tmp", "w") as f:
    json.dump(result, f)
os.replace(path + ".tmp", path)
code = result.get("exit_code")
if not isinstance(code, int):
    sys.exit(1)
sys.exit(code if 0 <= code < 256 else 128 + (-code % 128))
""",
    RESULT=RESULT_RECORD,
    ASSIGNMENT=ASSIGNMENT_RECORD,
    SHARE_RESULT=RESULT_NAME,
)


def duration(seconds: float) -> timedelta:
    """A whole number of seconds, at least one (Batch's durations are ISO 8601: ``PT1H``)."""
    return timedelta(seconds=max(1, math.ceil(seconds)))


def coordination_command(
    *, share_root: str, node_main: str, temp_dir: str, mount_lines: Sequence[str] = ()
) -> str:
    """Every node: the share is mounted (the node code is readable there), the job's own mounts are
    (``mount_lines``, job_mounts.py), and the job's folders exist."""
    q = shlex.quote
    script = "\n".join(
        [
            "set -eu",
            f"if [ ! -r {q(node_main)} ]; then",
            f"  echo {q(f'the workspace share is not mounted at {share_root} on this node')} "
            '"($AZ_BATCH_NODE_ID)" >&2',
            "  exit 1",
            "fi",
            *mount_lines,
            f"mkdir -p {q(posixpath.join(temp_dir, 'tmp'))}",
            f'echo "node $AZ_BATCH_NODE_ID ready for the job (share at {share_root})"',
        ]
    )
    return f"/bin/bash -c {shlex.quote(script)}"


def application_command(
    *, python: str, node_main: str, config: str, run_dir: str, unset: Sequence[str] = ()
) -> str:
    """The primary node: the job's launcher on the nodes Batch chose, then its outcome to the share.
    ``unset``: variables of the task the job must not see (the mount script's keys)."""
    q = shlex.quote
    script = "\n".join(
        [
            "set -u",
            *([f"unset {' '.join(unset)}"] if unset else []),
            'job_dir="${AZ_BATCH_TASK_WORKING_DIR:?}/batchai"',
            'mkdir -p "$job_dir"',
            f'{q(python)} -S -c {q(_PREPARE)} "$job_dir" {q(config)} {q(node_main)} {q(run_dir)} || exit 1',
            f'{q(python)} -S {q(node_main)} launch "$job_dir"',
            f'exec {q(python)} -S -c {q(_FINISH)} "$job_dir" {q(run_dir)}',
        ]
    )
    return f"/bin/bash -c {shlex.quote(script)}"


_PRIORITIES = {"low": -100, "normal": 0, "high": 100}


def batch_priority(value: object) -> int:
    """Batch AI's ``schedulingPriority`` (``low``/``normal``/``high``, or a number) as a Batch job
    priority (-1000..1000; higher runs first). Anything else is ``normal``."""
    if isinstance(value, str):
        return _PRIORITIES.get(value.strip().lower(), 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(-MAX_PRIORITY, min(MAX_PRIORITY, int(value)))
    return 0


def job_body(
    *,
    job_id: str,
    pool_id: str,
    key: str,
    priority: int = 0,
    max_wall_clock_seconds: float | None = None,
    preparation: bm.BatchJobPreparationTask | None = None,
    release: bm.BatchJobReleaseTask | None = None,
) -> bm.BatchJobCreateOptions:
    """The Batch job on the cluster's pool. It is created with ``onAllTasksComplete: noaction``: a job
    with no task yet counts as complete, so ``terminatejob`` set now could end it before its task is in
    (the spec's advice; Azure/azure-sdk-for-net#8764). ``ends_with_its_task`` turns it on once the task
    is added. Batch AI's ``schedulingPriority`` maps to the job priority (clamped to -1000..1000)."""
    return bm.BatchJobCreateOptions(
        id=job_id,
        display_name=f"batchai {key}",
        pool_info=bm.BatchPoolInfo(pool_id=pool_id),
        priority=max(-MAX_PRIORITY, min(MAX_PRIORITY, int(priority))),
        all_tasks_complete_mode=bm.BatchAllTasksCompleteMode.NO_ACTION,
        uses_task_dependencies=False,
        metadata=[bm.BatchMetadataItem(name="batchai-job", value=key)],
        constraints=None
        if max_wall_clock_seconds is None
        else bm.BatchJobConstraints(
            max_wall_clock_time=duration(max_wall_clock_seconds), max_task_retry_count=0
        ),
        job_preparation_task=preparation,
        job_release_task=release,
    )


def ends_with_its_task() -> bm.BatchJobUpdateOptions:
    """The PATCH sent once the job's task is in: the job terminates when its task completes."""
    return bm.BatchJobUpdateOptions(all_tasks_complete_mode=bm.BatchAllTasksCompleteMode.TERMINATE_JOB)


def task_body(
    *,
    node_count: int,
    application: str,
    coordination: str,
    env: Mapping[str, str],
    secret_names: Sequence[str],
    max_retries: int = 0,
    max_wall_clock_seconds: float | None = None,
) -> bm.BatchTaskCreateOptions:
    """The multi-instance task (shape of ``Tasks_CreateTaskCollection_Complex``), run as the pool's user
    (``UserIdentity.username``): it holds the SSH key the nodes share, which mpirun needs between nodes.
    ``env`` holds the secret values too (Batch's environment settings are the one way into the task;
    they are visible to holders of the account's keys, as the storage key is)."""
    settings = [bm.EnvironmentSetting(name=k, value=v) for k, v in sorted(env.items())]
    settings.append(bm.EnvironmentSetting(name="BATCHAI_SECRET_NAMES", value=",".join(sorted(secret_names))))
    return bm.BatchTaskCreateOptions(
        id=TASK_ID,
        display_name="batchai job",
        command_line=application,
        environment_settings=settings,
        constraints=bm.BatchTaskConstraints(
            max_task_retry_count=max(0, int(max_retries)),
            max_wall_clock_time=None if max_wall_clock_seconds is None else duration(max_wall_clock_seconds),
        ),
        required_slots=1,
        user_identity=bm.UserIdentity(username=POOL_USER),
        multi_instance_settings=bm.MultiInstanceSettings(
            number_of_instances=node_count, coordination_command_line=coordination
        ),
    )


def job_state(task: Mapping[str, Any]) -> tuple[JobState, int | None, str | None]:
    """(state, exit code, failure reason) of a Batch task (REST JSON, pure)."""
    state = str(task.get("state") or "active").lower()
    info = task.get("executionInfo") or {}
    if state == "active":
        return JobState.QUEUED, None, None
    if state in ("preparing", "running"):
        return JobState.RUNNING, None, None
    code = info.get("exitCode")
    failure = info.get("failureInfo") or {}
    if str(info.get("result") or "").lower() == "success" and code in (0, None):
        return JobState.SUCCEEDED, 0 if code is None else int(code), None
    message = failure.get("message") or failure.get("code")
    if failure.get("code") == "TaskEnded" or "terminat" in str(message).lower():
        return JobState.TERMINATED, code, str(message) if message else None
    return JobState.FAILED, None if code is None else int(code), f"Batch: {message}" if message else None


def requeues(task: Mapping[str, Any]) -> int:
    """How many times the service put the task back in the queue: preempted or lost nodes (requeue)
    and failed tries it retried (``maxTaskRetryCount``)."""
    info = task.get("executionInfo") or {}
    return int(info.get("requeueCount") or 0) + int(info.get("retryCount") or 0)
