"""What each Batch AI toolkit gives one rank: its variables, its command line, its role, and how many
processes a job has. Pure functions over a ``RankContext``; the rank shim calls them on every node.

Standard library only: this file runs on the nodes with the nodes' own Python (``python -S``), and imports
nothing else from batchai_sdk.

``settings`` is the toolkit's part of the launch configuration (``launch.json["toolkit_settings"]``, built
by ``batchai_sdk.launch.toolkit_settings_for_launch``), with snake_case keys:

=============  ==========================================================================================
toolkit        settings keys (all optional)
=============  ==========================================================================================
horovod        ``process_count``
custommpi      ``process_count``
custom         (none)
pytorch        ``process_count``, ``communication_backend`` (``tcp``, ``gloo``, ``nccl``, ``mpi``, any case)
tensorflow     ``worker_count``, ``parameter_server_count``, ``master_args``, ``worker_args``,
               ``parameter_server_args`` (lists of strings)
chainer        ``process_count``
cntk           ``process_count``, ``language_type`` (``Python`` | ``BrainScript``), ``config_file``
caffe          ``process_count``, ``config_file``
caffe2         (none)
=============  ==========================================================================================

Rank layout: ``world_size`` processes are spread over the job's nodes as ``ranks_per_node`` says (evenly,
first nodes first; mpirun fills the hostfile slot by slot), so rank ``r`` runs on the node whose slots hold
it. For TensorFlow the first ``worker_count`` ranks are the workers (worker 0 is Batch AI's *master*: it
gets ``master_args``) and the next ``parameter_server_count`` ranks are the parameter servers; task ``i``
of the job (rank ``i``) listens on ``master_port + i`` of its node.

Parameter servers never end by themselves: the rank shim runs them with ``run_parameter_server``, which
stops a parameter server (exit status 0) once every worker has called ``mark_worker_done``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TOOLKITS",
    "RankContext",
    "backend_notice",
    "hostfile_slots",
    "mark_worker_done",
    "process_count",
    "rank_argv",
    "rank_env",
    "rank_layout",
    "ranks_per_node",
    "resolve_backend",
    "role",
    "run_parameter_server",
    "task_log_names",
    "tf_counts",
    "workers_done",
]

TOOLKITS = ("horovod", "custommpi", "custom", "pytorch", "tensorflow", "chainer", "cntk", "caffe", "caffe2")
TORCH_BACKENDS = ("tcp", "gloo", "nccl", "mpi")
# One process per node unless process_count says otherwise (Batch AI: "defaults to nodeCount").
_PER_NODE_DEFAULT = ("horovod", "custommpi", "chainer", "cntk", "caffe", "caffe2")
DONE_FOLDER = "tensorflow-workers-done"
# Command lines (custom, custommpi, job preparation) run under bash, as Batch AI ran them: `source` works.
# No rc file: a bash whose stdin is the SSH channel reads ~/.bashrc on its own, and a pyenv or conda line
# there would put another python and pip first on the job's PATH.
SHELL = ("bash", "--noprofile", "--norc", "-c")


@dataclass(frozen=True)
class RankContext:
    """Where one rank stands in its job. ``node_addresses[node_rank]`` is its node; ``[0]`` the head."""

    toolkit: str
    settings: Mapping[str, Any]
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    node_count: int
    node_addresses: Sequence[str]
    master_port: int
    python: str
    script: str | None
    args: Sequence[str]
    command_line: str | None = None  # custommpi / custom: run through bash -c
    gpus_per_node: int = 0
    ranks_per_node: Sequence[int] = field(default=())  # empty: ranks_per_node(node_count, world_size)

    def layout(self) -> list[int]:
        return list(self.ranks_per_node) or ranks_per_node(self.node_count, self.world_size)


# --------------------------------------------------------------------------------------------- layout


def ranks_per_node(node_count: int, world_size: int) -> list[int]:
    """``world_size`` ranks spread evenly over ``node_count`` nodes, the first nodes taking the rest."""
    if node_count < 1 or world_size < 1:
        raise ValueError(f"need at least one node and one rank, got {node_count} nodes, {world_size} ranks")
    base, extra = divmod(world_size, node_count)
    return [base + (1 if i < extra else 0) for i in range(node_count)]


def rank_layout(rank: int, layout: Sequence[int]) -> tuple[int, int, int]:
    """``(node_rank, local_rank, local_world_size)`` of ``rank`` when node ``i`` holds ``layout[i]`` ranks."""
    if rank < 0:
        raise ValueError(f"rank {rank} < 0")
    first = 0
    for node, count in enumerate(layout):
        if rank < first + count:
            return node, rank - first, count
        first += count
    raise ValueError(f"rank {rank} is outside the layout {list(layout)} ({first} ranks)")


def _node_of(rank: int, layout: Sequence[int]) -> int:
    return rank_layout(rank, layout)[0]


# ------------------------------------------------------------------------------------------ counting


def _count(settings: Mapping[str, Any], key: str) -> int | None:
    value = settings.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"toolkit setting {key} must be an integer >= 0, got {value!r}")
    return value


def tf_counts(settings: Mapping[str, Any], node_count: int) -> tuple[int, int]:
    """(workers, parameter servers) as Batch AI counted them: workers default to one per node; parameter
    servers to 1 for distributed training (more than one worker or node, or ``parameter_server_args``
    given), to none for a single process."""
    workers = _count(settings, "worker_count")
    servers = _count(settings, "parameter_server_count")
    if workers is None:
        workers = node_count
    if servers is None:
        distributed = workers > 1 or node_count > 1
        servers = 1 if distributed or settings.get("parameter_server_args") is not None else 0
    if workers < 1:
        raise ValueError("a TensorFlow job needs at least one worker")
    return workers, servers


def process_count(toolkit: str, settings: Mapping[str, Any], node_count: int, gpus_per_node: int) -> int:
    """How many processes the job starts.

    tensorflow: workers + parameter servers (see ``tf_counts``). custom: 1 (the command runs once, on the
    head node). The others, pytorch included: ``process_count``, else one per node (Batch AI: "the default
    value for this property is equal to nodeCount"). ``gpus_per_node`` is kept for callers; it no longer
    changes the count.
    """
    _check_toolkit(toolkit)
    if node_count < 1:
        raise ValueError(f"node_count must be >= 1, got {node_count}")
    if toolkit == "custom":
        return 1
    if toolkit == "tensorflow":
        workers, servers = tf_counts(settings, node_count)
        return workers + servers
    given = _count(settings, "process_count")
    return given or node_count


def hostfile_slots(toolkit: str, ranks: Sequence[int]) -> list[int]:
    """The slots ``$AZ_BATCHAI_MPI_HOST_FILE`` gives each node of the job, whose ranks are ``ranks``.

    custom and custommpi: every node of the job, at least one slot each, as Batch AI listed them — a job
    that starts its own ``mpirun --hostfile $AZ_BATCHAI_MPI_HOST_FILE`` runs on all its nodes (the nodes
    without a rank of ours come last, so ``mpirun -np <ranks>`` still fills the others first). The rest:
    the nodes' ranks (a node without one is left out).
    """
    if toolkit in ("custom", "custommpi"):
        return [max(1, int(n)) for n in ranks]
    return [int(n) for n in ranks]


def task_log_names(ctx: RankContext) -> tuple[str, str] | None:
    """Per-process logs as Batch AI wrote them in stdouterr, beside the merged stdout.txt/stderr.txt:
    TensorFlow's per task (``stdout-wk-0.txt``, ``stderr-ps-0.txt``; worker 0, the master, is ``wk-0``),
    PyTorch's and Caffe2's per process (``stdout-0.txt``, ``stderr-0.txt``: the PyTorch and Caffe2 recipes
    stream them); None for the others."""
    if ctx.toolkit in ("pytorch", "caffe2"):
        return f"stdout-{ctx.rank}.txt", f"stderr-{ctx.rank}.txt"
    if ctx.toolkit != "tensorflow":
        return None
    kind = "ps" if role(ctx) == "ps" else "wk"
    index = task_index(ctx)
    return f"stdout-{kind}-{index}.txt", f"stderr-{kind}-{index}.txt"


# ---------------------------------------------------------------------------------------------- roles


def role(ctx: RankContext) -> str:
    """``master`` (TensorFlow worker 0), ``worker`` or ``ps`` (TensorFlow parameter server); ``worker`` for
    every other toolkit."""
    if ctx.toolkit != "tensorflow":
        return "worker"
    workers, _ = tf_counts(ctx.settings, ctx.node_count)
    if ctx.rank == 0:
        return "master"
    return "worker" if ctx.rank < workers else "ps"


def task_index(ctx: RankContext) -> int:
    """``AZ_BATCHAI_TASK_INDEX``: the node's index for horovod, custommpi and custom (as Batch AI ran one
    task per node); the index within its role for tensorflow; the global rank for the others."""
    if ctx.toolkit in ("horovod", "custommpi", "custom"):
        return ctx.node_rank
    if ctx.toolkit == "tensorflow":
        workers, _ = tf_counts(ctx.settings, ctx.node_count)
        return ctx.rank if ctx.rank < workers else ctx.rank - workers
    return ctx.rank


# -------------------------------------------------------------------------------------------- backend


def resolve_backend(settings: Mapping[str, Any], gpus_per_node: int) -> str:
    """The torch.distributed backend: ``communication_backend`` lower-cased, ``tcp`` (gone from torch
    since 1.0) as ``gloo``; unset: ``nccl`` with GPUs, ``gloo`` without."""
    given = settings.get("communication_backend")
    if given is None:
        return "nccl" if gpus_per_node > 0 else "gloo"
    name = str(given).lower()
    if name not in TORCH_BACKENDS:
        raise ValueError(f"communication_backend {given!r}: expected one of {', '.join(TORCH_BACKENDS)}")
    return "gloo" if name == "tcp" else name


def backend_notice(toolkit: str, settings: Mapping[str, Any]) -> str | None:
    """A line for the job's stderr.txt (once per job) when the settings ask for something torch no longer
    has or PyPI's torch lacks; None otherwise."""
    if toolkit != "pytorch":
        return None
    given = settings.get("communication_backend")
    name = str(given).lower() if given is not None else None
    if name == "tcp":
        return f"communicationBackend {given} no longer exists in torch: using gloo"
    if name == "mpi":
        return (
            f"communicationBackend {given} needs a torch built with MPI (the wheels on PyPI are not): "
            "use gloo (CPU) or nccl (GPU) if init_process_group fails"
        )
    return None


# ------------------------------------------------------------------------------------------ variables


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _task_hosts(ctx: RankContext, first: int, count: int) -> list[str]:
    layout = ctx.layout()
    return [
        f"{_host(ctx.node_addresses[_node_of(r, layout)])}:{ctx.master_port + r}"
        for r in range(first, first + count)
    ]


def rank_env(ctx: RankContext) -> dict[str, str]:
    """The variables this rank gets on top of the job's (all values are strings).

    Every toolkit: ``AZ_BATCHAI_TASK_INDEX`` (see ``task_index``).
    pytorch: torchrun's ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``, ``NODE_RANK`` (and ``GROUP_RANK``, ``ROLE_RANK``, ``ROLE_WORLD_SIZE``), plus
    ``AZ_BATCHAI_PYTORCH_INIT_METHOD`` (``tcp://MASTER_ADDR:MASTER_PORT``) and
    ``AZ_BATCHAI_PYTORCH_BACKEND``.
    tensorflow: ``TF_CONFIG`` (``{"cluster": {"worker": [...], "ps": [...]}, "task": {"type", "index"}}``,
    ``ps`` only when there are parameter servers), ``AZ_BATCHAI_WORKER_HOSTS`` and ``AZ_BATCHAI_PS_HOSTS``
    (comma-separated ``host:port``), ``AZ_BATCHAI_TF_ROLE``.
    """
    _check_toolkit(ctx.toolkit)
    env = {"AZ_BATCHAI_TASK_INDEX": str(task_index(ctx))}
    if ctx.toolkit == "pytorch":
        addr = ctx.node_addresses[0]
        env.update(
            {
                "MASTER_ADDR": addr,
                "MASTER_PORT": str(ctx.master_port),
                "WORLD_SIZE": str(ctx.world_size),
                "RANK": str(ctx.rank),
                "LOCAL_RANK": str(ctx.local_rank),
                "LOCAL_WORLD_SIZE": str(ctx.local_world_size),
                "NODE_RANK": str(ctx.node_rank),
                "GROUP_RANK": str(ctx.node_rank),
                "ROLE_RANK": str(ctx.rank),
                "ROLE_WORLD_SIZE": str(ctx.world_size),
                "AZ_BATCHAI_PYTORCH_INIT_METHOD": f"tcp://{_host(addr)}:{ctx.master_port}",
                "AZ_BATCHAI_PYTORCH_BACKEND": resolve_backend(ctx.settings, ctx.gpus_per_node),
            }
        )
    elif ctx.toolkit == "tensorflow":
        workers, servers = tf_counts(ctx.settings, ctx.node_count)
        if ctx.world_size != workers + servers:
            raise ValueError(
                f"world_size {ctx.world_size} != {workers} workers + {servers} parameter servers"
            )
        worker_hosts = _task_hosts(ctx, 0, workers)
        ps_hosts = _task_hosts(ctx, workers, servers)
        cluster: dict[str, list[str]] = {"worker": worker_hosts}
        if ps_hosts:
            cluster["ps"] = ps_hosts
        kind = "ps" if role(ctx) == "ps" else "worker"
        tf_config = {"cluster": cluster, "task": {"type": kind, "index": task_index(ctx)}}
        env.update(
            {
                "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
                "AZ_BATCHAI_WORKER_HOSTS": ",".join(worker_hosts),
                "AZ_BATCHAI_PS_HOSTS": ",".join(ps_hosts),
                "AZ_BATCHAI_TF_ROLE": role(ctx),
            }
        )
    return env


# ------------------------------------------------------------------------------------------- commands


def _strings(settings: Mapping[str, Any], key: str) -> list[str] | None:
    value = settings.get(key)
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"toolkit setting {key} must be a list of strings, got {value!r}")
    return list(value)


def rank_argv(ctx: RankContext) -> list[str]:
    """The rank's command as written (``$VARS`` unexpanded: the shim expands them on the node).

    horovod, pytorch, chainer, caffe2, cntk (Python), caffe (PyCaffe script): ``python script args...``.
    tensorflow: ``python script`` + ``master_args`` for the master (``worker_args`` when there are none),
    ``worker_args`` for the other workers, ``parameter_server_args`` for the parameter servers.
    cntk with ``language_type`` BrainScript: ``cntk configFile=<config_file> args...``.
    caffe with ``config_file``: ``caffe train --solver=<config_file> args...``.
    custommpi, custom: ``bash -c <command_line>``.
    """
    _check_toolkit(ctx.toolkit)
    s = ctx.settings
    if ctx.toolkit in ("custommpi", "custom"):
        if not ctx.command_line:
            raise ValueError(f"a {ctx.toolkit} rank needs a command line")
        return [*SHELL, ctx.command_line]
    if ctx.toolkit == "cntk" and str(s.get("language_type") or "Python").lower() == "brainscript":
        return ["cntk", f"configFile={_config(ctx)}", *ctx.args]
    if ctx.toolkit == "caffe" and s.get("config_file") and not ctx.script:
        return ["caffe", "train", f"--solver={_config(ctx)}", *ctx.args]
    if not ctx.script:
        raise ValueError(f"a {ctx.toolkit} rank needs a script")
    if ctx.toolkit == "tensorflow":
        kind = role(ctx)
        if kind == "master":
            args = _strings(s, "master_args")
            if args is None:
                args = _strings(s, "worker_args") or []
        elif kind == "worker":
            args = _strings(s, "worker_args") or []
        else:
            args = _strings(s, "parameter_server_args") or []
        return [ctx.python, ctx.script, *args]
    return [ctx.python, ctx.script, *ctx.args]


def _config(ctx: RankContext) -> str:
    config = ctx.settings.get("config_file")
    if not isinstance(config, str) or not config:
        raise ValueError(f"a {ctx.toolkit} rank needs config_file")
    return config


def _check_toolkit(toolkit: str) -> None:
    if toolkit not in TOOLKITS:
        raise ValueError(f"unknown toolkit {toolkit!r}: expected one of {', '.join(TOOLKITS)}")


# ----------------------------------------------------------------------- TensorFlow parameter servers


def _done_path(shared_dir: str, index: int) -> str:
    return os.path.join(shared_dir, DONE_FOLDER, f"worker-{index}.done")


def mark_worker_done(shared_dir: str, index: int) -> None:
    """Record that TensorFlow worker ``index`` ended with status 0. ``shared_dir`` is the job's
    ``AZ_BATCHAI_SHARED_JOB_TEMP`` (on the share: every node sees it). Call it after the worker's process
    has exited successfully; a worker that fails does not call it (mpirun ends the job then anyway)."""
    if index < 0:
        raise ValueError(f"worker index {index} < 0")
    os.makedirs(os.path.join(shared_dir, DONE_FOLDER), exist_ok=True)
    path = _done_path(shared_dir, index)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{time.time():.3f}\n")
    os.replace(tmp, path)


def workers_done(shared_dir: str, worker_count: int) -> bool:
    """Whether workers ``0 .. worker_count-1`` have all called ``mark_worker_done``."""
    return all(os.path.exists(_done_path(shared_dir, i)) for i in range(worker_count))


def run_parameter_server(
    proc: subprocess.Popen[Any],
    shared_dir: str,
    worker_count: int,
    *,
    poll: float = 0.5,
    grace: float = 10.0,
) -> int:
    """Wait for a parameter server's process: once every worker is done, send it SIGTERM (SIGKILL after
    ``grace`` seconds) and return 0 — being stopped is how a parameter server ends. If it exits before
    the workers are done, its own status is returned (a failure unless 0)."""
    while True:
        code = proc.poll()
        if code is not None:
            return code
        if workers_done(shared_dir, worker_count):
            break
        time.sleep(poll)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return 0
