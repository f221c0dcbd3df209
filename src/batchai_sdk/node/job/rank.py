"""One process of a job, started by mpirun (or by the launcher for a custom toolkit): sets the rank's
variables, expands ``$VARS`` in the script path and args on its node, runs the script, relays its output
in whole lines and logs its start and end to ``execution-<node>.log``.

The log line names the command as written (``$NAME``), never the expanded values: a secret passed as
``$API_TOKEN`` stays out of the share's logs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..common import expand, job_env, load, load_or_none, script_python, try_append, write_json_atomic
from ..policy.toolkits import SHELL
from ..protocol.launch import LaunchConfig, given
from ..protocol.paths import eviction_marker, simulated_eviction
from . import containers

if TYPE_CHECKING:
    from ..policy.toolkits import RankContext


def make_node_dirs(cfg: LaunchConfig) -> None:
    os.makedirs(cfg["env"]["AZ_BATCHAI_JOB_TEMP"], exist_ok=True)
    make_mount_link(cfg)


def make_mount_link(cfg: LaunchConfig) -> None:
    """The job's mount root on this node: a link to the share at its mount_path (``mount_link``) and one to
    each of the job's mounts (``mount_links``: where this node sees that storage; launch.job_mount_links)."""
    link = cfg.get("mount_link")
    links = [link] if link else []
    links += cfg.get("mount_links") or []
    for link in links:
        os.makedirs(os.path.dirname(link["path"]), exist_ok=True)
        try:
            os.symlink(link["target"], link["path"])
        except FileExistsError:
            pass  # another rank of the job on this node made it


def _open_copy(path: str | None) -> Any:
    """``path`` opened for appending bytes, or None (no path, or the share refuses it)."""
    if path is None:
        return None
    try:
        return open(path, "ab")
    except OSError:
        return None


def relay_lines(source: Any, fd: int, last: list[bytes] | None = None, copy_path: str | None = None) -> None:
    """Copy a rank's output to ``fd`` in whole lines, one write each; keep its last lines in ``last``;
    append it to ``copy_path`` too when given (TensorFlow's per-task logs).

    mpirun forwards each write of each rank as it comes; an unbuffered Python writes a line's text and its
    newline separately, so without this two ranks' lines run into one another.
    """
    pending = b""
    copy = _open_copy(copy_path)
    while True:
        chunk = os.read(source.fileno(), 65536)
        if not chunk:
            break
        if copy is not None:
            try:
                copy.write(chunk)
                copy.flush()
            except OSError:
                copy = None  # a full share: the job's stdout.txt still gets every line
        if last is not None:
            # last[-1] is the line still being written (b"" after a newline): a chunk continues it only
            tail = last.pop() if last else b""
            last.extend((tail + chunk).split(b"\n"))
            del last[:-41]
        pending += chunk
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
        try:
            if cut >= 0:
                os.write(fd, pending[: cut + 1])
                pending = pending[cut + 1 :]
            elif len(pending) >= 65536:
                os.write(fd, pending)
                pending = b""
        except OSError:
            pending = b""  # the reader went away or the disk is full: keep draining, never block the rank
    if pending:
        with contextlib.suppress(OSError):
            os.write(fd, pending)


def container_env(cfg: LaunchConfig, env: dict[str, str]) -> dict[str, str]:
    """What a rank in a container gets: the job's variables and the MPI runtime's, not the host's PATH."""
    names = set(cfg["env"]) - {"PATH"} | {"AZ_BATCHAI_TASK_INDEX", "PYTHONUNBUFFERED", "BATCHAI_JOB_TAG"}
    names |= {k for k in env if k.startswith(("OMPI_", "PMIX_", "OPAL_", "HOROVOD_", "NCCL_"))}
    names |= set(cfg.get("secret_names", []))
    return {k: env[k] for k in sorted(names) if k in env and "\n" not in env[k]}


def write_env_file(path: str, values: dict[str, str]) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)  # may hold secrets
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.writelines(f"{k}={v}\n" for k, v in values.items())


def container_argv(
    runtime: str, image: str, argv: list[str], *, workdir: str, mounts: list[str], env_file: str, gpus: bool
) -> list[str]:
    """``docker run`` for one rank: host network, IPC and PIDs (MPI and NCCL talk as on the host), the share
    and the job's node folders at the same paths, the variables from a 0600 file (never on a command line)."""
    cmd = [
        runtime,
        "run",
        "--rm",
        "--network",
        "host",
        "--ipc",
        "host",
        "--pid",
        "host",
        "--env-file",
        env_file,
        "-w",
        workdir,
    ]
    if gpus:
        cmd += ["--gpus", "all"]
    for mount in dict.fromkeys(mounts):
        cmd += ["-v", f"{mount}:{mount}"]
    return [*cmd, image, *argv]


def rank_command(cfg: LaunchConfig) -> list[str]:
    """The rank's command as written in the job (``$VARS`` unexpanded)."""
    if cfg["toolkit"] == "horovod":
        return [script_python(cfg), given(cfg["script"], "script"), *cfg["args"]]
    return [*SHELL, given(cfg["command_line"], "command_line")]


def in_container(
    cfg: LaunchConfig, env: dict[str, str], argv: list[str], rank: int, log: str
) -> tuple[list[str], str | None]:
    """``argv`` wrapped in ``docker run`` when the job names an image and an engine answers."""
    image = cfg.get("container_image")
    if not image:
        return argv, None
    runtime = containers.find_engine(env.get("PATH"))
    if runtime is None:
        warning = (
            f"warning: containerSettings asks for image {image} but no container runtime (docker, "
            f"podman) answers on {socket.gethostname()}: rank {rank} runs on the host\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, warning.encode())
        try_append(log, warning.strip())
        return argv, None
    if cfg["toolkit"] == "horovod":
        argv = [cfg.get("container_python") or "python", *argv[1:]]
    env_file = os.path.join(env["AZ_BATCHAI_JOB_TEMP"], f"rank-{rank}.env")
    write_env_file(env_file, container_env(cfg, env))
    mounts = [cfg["share_root"], os.path.dirname(env["AZ_BATCHAI_JOB_TEMP"]), tempfile.gettempdir()]
    # the cluster's mounts and where the job's mount links lead: the links resolve inside the container too
    mounts += [env["AZ_BATCHAI_MOUNT_ROOT"]] if env.get("AZ_BATCHAI_MOUNT_ROOT") else []
    mounts += [link["target"] for link in cfg.get("mount_links") or []]
    wrapped = container_argv(
        runtime,
        containers.qualify_image(image),
        argv,
        workdir=cfg["wd"],
        mounts=mounts,
        env_file=env_file,
        gpus=int(env.get("AZ_BATCHAI_NUM_GPUS", "0") or 0) > 0,
    )
    return wrapped, env_file


def run_rank(config_path: str, secrets: dict[str, str] | None = None) -> int:
    cfg: LaunchConfig = load(config_path)
    make_node_dirs(cfg)
    env = job_env(cfg, secrets)
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
    nodes = env.get("BATCHAI_RANK_NODES", "").split(",")
    node = nodes[rank] if rank < len(nodes) and nodes[rank] else cfg["head"]
    order = env.get("BATCHAI_JOB_NODES", "").split(",")
    env["AZ_BATCHAI_TASK_INDEX"] = str(order.index(node) if node in order else 0)
    env.setdefault("PYTHONUNBUFFERED", "1")
    ctx = framework_context(cfg, env, rank)
    task_logs = None
    if ctx is not None:
        from ..policy import toolkits

        task_logs = toolkits.task_log_names(ctx)  # TensorFlow: stdout-wk-0.txt, ...
        # pytorch, tensorflow, chainer, cntk, caffe, caffe2: the framework's own variables
        env.update(toolkits.rank_env(ctx))
        written = toolkits.rank_argv(ctx)
    else:
        written = rank_command(cfg)
    expands = cfg["toolkit"] not in ("custom", "custommpi")
    argv = [expand(a, env) for a in written] if expands else written
    log = os.path.join(cfg["stdouterr_dir"], f"execution-{node}.log")
    argv, env_file = in_container(cfg, env, argv, rank, log)
    shown = shlex.join(written)
    try_append(log, f"rank {rank} starting on {socket.gethostname()} (pid {os.getpid()}): {shown}")
    last_err: list[bytes] = []
    out_copy, err_copy = (
        (os.path.join(cfg["stdouterr_dir"], task_logs[0]), os.path.join(cfg["stdouterr_dir"], task_logs[1]))
        if task_logs
        else (None, None)
    )

    def start_child() -> tuple[subprocess.Popen[bytes], list[threading.Thread]]:
        proc = subprocess.Popen(argv, cwd=cfg["wd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threads = [
            threading.Thread(target=relay_lines, args=(proc.stdout, 1, None, out_copy), daemon=True),
            threading.Thread(target=relay_lines, args=(proc.stderr, 2, last_err, err_copy), daemon=True),
        ]
        for t in threads:
            t.start()
        return proc, threads

    child, relays = start_child()
    watcher = start_eviction_watch(cfg, env, node, log)
    received: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        received.append(signum)
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    shared = env.get("AZ_BATCHAI_SHARED_JOB_TEMP", "")
    role = toolkits.role(ctx) if ctx is not None else "worker"
    if role == "ps":  # a TensorFlow parameter server runs until the workers are done, then is stopped
        workers, _ = toolkits.tf_counts(ctx.settings if ctx else {}, len(cfg["ranks_per_node"]))
        code = toolkits.run_parameter_server(child, shared, workers)
    else:
        code = child.wait()
        restarts = elastic_restarts(ctx)
        done = 0
        while code != 0 and not received and done < restarts:  # torchrun's --max-restarts, in place
            done += 1
            for t in relays:
                t.join(timeout=5)
            described = f"signal {-code}" if code < 0 else f"code {code}"
            try_append(log, f"rank {rank} exited with {described}; restarted in place ({done} of {restarts})")
            env["TORCHELASTIC_RESTART_COUNT"] = str(done)
            child, relays = start_child()
            code = child.wait()
        if ctx is not None and ctx.toolkit == "tensorflow" and code == 0:
            toolkits.mark_worker_done(shared, toolkits.task_index(ctx))
    for t in relays:
        t.join(timeout=5)
    if watcher is not None:
        watcher.finish()  # an eviction in progress acknowledges the event before this process ends
    if env_file:
        with contextlib.suppress(OSError):
            os.unlink(env_file)
    described = f"signal {-code}" if code < 0 else f"code {code}"
    stopped = f" after it was sent signal {received[0]}" if received else ""
    if code != 0 and not received:
        line = last_error_line(last_err)
        if line:
            if ctx is not None and ctx.toolkit == "pytorch" and code == -signal.SIGABRT:
                line += gloo_exit_race_hint(line)
            try_append(log, f"rank {rank} said: {line}")
    try_append(log, f"rank {rank} exited with {described}{stopped}")
    return 128 - code if code < 0 else code


def elastic_restarts(ctx: RankContext | None) -> int:
    """How often a PyTorch rank that fails is started again in place (``toolkit_settings`` ``max_restarts``,
    as torchrun's ``--max-restarts``): its node lives, so a crash costs a process start, not a requeue."""
    if ctx is None or ctx.toolkit != "pytorch":
        return 0
    value = ctx.settings.get("max_restarts")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


GLOO_EXIT_RACE = "terminate called without an active exception"


def gloo_exit_race_hint(line: str) -> str:
    """What to do when a PyTorch rank aborted as its interpreter shut down under Gloo's threads.

    Gloo's worker threads still drop their last work (and its Python references) after
    ``destroy_process_group()``; one still waiting for the GIL when Python finalizes aborts the whole
    process (pytorch/pytorch#190489, open in torch 2.14), so a script that trained well fails at exit.
    """
    if line != GLOO_EXIT_RACE:
        return ""
    return (
        " (at exit: PyTorch's Gloo threads outlived the interpreter, pytorch/pytorch#190489;"
        " give them a moment after dist.destroy_process_group(), e.g. time.sleep(0.2); docs/toolkits.md)"
    )


_FRAME = re.compile(r'^File "(?P<file>[^"]+)", line (?P<line>\d+)')


def last_error_line(lines: list[bytes]) -> str | None:
    """The line that says why a rank failed: its last exception or ``error:`` line, else its last line.

    An exception line gets the place of the traceback's last frame, the line that raised it (or, for a
    SyntaxError, the line that does not parse): ``NameError: name 'x' is not defined (train.py:12)``.
    """
    text = [ln.decode(errors="replace").strip() for ln in lines if ln.strip()]
    for i in range(len(text) - 1, -1, -1):
        line = text[i]
        head = line.split(":", 1)[0]
        if line.startswith("error:"):
            return line[:300]
        if head.endswith(("Error", "Exception", "Interrupt", "Exit")) and " " not in head:
            frame = next((m for m in map(_FRAME.match, reversed(text[:i])) if m), None)
            where = f" ({os.path.basename(frame['file'])}:{frame['line']})" if frame else ""
            return line[: 300 - len(where)] + where
    return text[-1][:300] if text else None


class EvictionWatch:
    """One rank shim per node watches for an eviction notice: Azure's Scheduled Events for this VM (on a
    Spot / low-priority cluster), or one ``cluster.simulate_eviction`` left in the job's run folder. On a
    notice it marks the eviction in the run folder (the scheduler then requeues the job without spending a
    retry), sends SIGTERM to the job's processes here so they checkpoint, and acknowledges the event (a
    real one) shortly before the VM is taken."""

    def __init__(self, cfg: LaunchConfig, env: dict[str, str], node: str, log: str) -> None:
        self.cfg, self.node, self.log = cfg, node, log
        self.tag = env.get("BATCHAI_JOB_TAG", "")
        self.rank_nodes = env.get("BATCHAI_RANK_NODES", "").split(",")
        self.simulated = os.path.join(cfg["run_dir"], simulated_eviction(node))
        self.stop = threading.Event()
        self.evicting = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        from ..azure import evictions

        vm_name = None
        try:
            while not self.stop.wait(1.0):
                self.drill()
                notice = load_or_none(self.simulated)
                if notice:
                    return self.on_notice(notice, None)
                if not self.cfg.get("eviction_watch"):
                    continue
                try:
                    vm_name = vm_name or evictions.get_vm_name()
                    found = evictions.poll(vm_name)
                except evictions.ImdsError:
                    continue  # not answering yet: try again
                if found:
                    return self.on_notice(found[0].to_dict(), found[0])
        finally:
            self.done.set()

    def drill(self) -> None:
        """A fault drill's request for this node and attempt (``job.inject_fault``), done here."""
        from . import faults

        request = faults.pending(self.cfg["run_dir"], self.node, self.tag)
        if request is not None:
            say = functools.partial(try_append, self.log)
            faults.apply(request, self.cfg["run_dir"], self.tag, self.node, self.rank_nodes, say)

    def on_notice(self, notice: dict[str, Any], real: Any) -> None:
        from ..azure import evictions
        from . import procs

        self.evicting.set()
        marker = os.path.join(self.cfg["run_dir"], eviction_marker(self.node))
        with contextlib.suppress(OSError):
            write_json_atomic(marker, {"node": self.node, **notice})
        kind = notice.get("event_type", "Preempt")
        try_append(self.log, f"eviction notice for {self.node}: {kind} at {notice.get('not_before')}")
        if real is not None:
            evictions.evict(real, procs.rank_pids(self.tag))
        else:  # simulated: the same signal and grace, nothing to acknowledge
            grace = float(notice.get("grace_seconds") or 30)
            evictions.terminate_and_wait(procs.rank_pids(self.tag), time.monotonic() + grace)

    def finish(self) -> None:
        self.stop.set()
        if self.evicting.is_set():
            self.done.wait(timeout=120)


def start_eviction_watch(cfg: LaunchConfig, env: dict[str, str], node: str, log: str) -> EvictionWatch | None:
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
    rank_nodes = env.get("BATCHAI_RANK_NODES", "").split(",")
    first_here = node not in rank_nodes or rank_nodes.index(node) == rank  # one watcher per node
    if not first_here or not cfg.get("run_dir"):
        return None
    watch = EvictionWatch(cfg, env, node, log)
    watch.thread.start()
    return watch


FRAMEWORKS = ("pytorch", "tensorflow", "chainer", "cntk", "caffe", "caffe2")


def framework_context(
    cfg: LaunchConfig, env: dict[str, str], rank: int, layout: list[int] | None = None
) -> RankContext | None:
    """Where this rank stands, for the toolkits whose variables and command the framework functions make;
    ``layout``: ranks per node where the launcher's own (``ranks_per_node``) is not in force (Slurm)."""
    if cfg["toolkit"] not in FRAMEWORKS:
        return None
    from ..policy import toolkits  # imported only where needed: the shim starts with every job

    layout = layout or [int(n) for n in cfg["ranks_per_node"]]
    node_rank, local_rank, local_world = toolkits.rank_layout(rank, layout)
    addresses = env.get("BATCHAI_NODE_ADDRESSES", "").split(",")
    return toolkits.RankContext(
        toolkit=cfg["toolkit"],
        settings=cfg.get("toolkit_settings") or {},
        rank=rank,
        world_size=sum(layout),
        local_rank=local_rank,
        local_world_size=local_world,
        node_rank=node_rank,
        node_count=len(layout),
        node_addresses=addresses,
        master_port=int(env.get("BATCHAI_MASTER_PORT", "29500")),
        python=script_python(cfg),
        script=cfg.get("script"),
        args=list(cfg.get("args") or []),
        command_line=cfg.get("command_line"),
        gpus_per_node=int(cfg.get("gpus_per_node") or 0),
        ranks_per_node=layout,
    )


def pull_image(image: str, env: dict[str, str], log: str) -> None:
    """Pull the job's image on this machine before its ranks start (nothing when no engine answers: the
    ranks then run on the host and say so)."""
    engine = containers.find_engine(env.get("PATH"))
    if engine is None:
        return
    full = containers.qualify_image(image)
    name = containers.engine_name(engine)
    try_append(log, f"pulling image {full} with {name} on {socket.gethostname()}")
    started = time.monotonic()
    try:
        containers.pull(engine, full, env, timeout=containers.pull_timeout(env))
    except containers.PullError as exc:
        try_append(log, str(exc))
        raise
    try_append(log, f"pulled image {full} in {time.monotonic() - started:.1f} s")


def run_prep(
    config_path: str,
    node: str,
    secrets: dict[str, str] | None = None,
    stop: Callable[[], bool] | None = None,
) -> int:
    """On a node: make the job's node-local directories, pull the job's image, run the job preparation
    command once. Raises ``containers.PullError`` when the image could not be pulled. ``stop`` is asked
    while the command runs: once it is true the command's whole process group is ended (terminate during
    preparation is prompt) and the result is -SIGTERM."""
    cfg: LaunchConfig = load(config_path)
    make_node_dirs(cfg)
    env = job_env(cfg, secrets)
    out_dir = cfg["stdouterr_dir"]
    log = os.path.join(out_dir, f"execution-{node}.log")
    image = cfg.get("container_image")
    if image:
        pull_image(image, job_env(cfg), log)  # the engine needs none of the secrets
    if cfg.get("requirements"):  # source_dir's requirements.txt, into the job's (cached) venv
        from . import requirements

        try_append(log, f"requirements: into {cfg['requirements']['venv']}")
        with (
            open(os.path.join(out_dir, f"stdout-job_prep-{node}.txt"), "ab") as out,
            open(os.path.join(out_dir, f"stderr-job_prep-{node}.txt"), "ab") as err,
        ):
            code = requirements.ensure(cfg["requirements"], cfg["wd"], env, out, err)
        try_append(log, f"requirements: exit code {code}")
        if code != 0:
            return code
    if not cfg.get("job_preparation"):
        return 0
    try_append(log, f"job preparation started on {socket.gethostname()}")
    with (
        open(os.path.join(out_dir, f"stdout-job_prep-{node}.txt"), "ab") as out,
        open(os.path.join(out_dir, f"stderr-job_prep-{node}.txt"), "ab") as err,
    ):
        proc = subprocess.Popen(
            [*SHELL, given(cfg["job_preparation"], "job_preparation")],
            cwd=cfg["wd"],
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=stop is not None,  # a group of its own, ended whole on stop
        )
        code = wait_or_stop(proc, stop)
    try_append(log, f"job preparation exited with code {code}")
    return code


def wait_or_stop(proc: subprocess.Popen[bytes], stop: Callable[[], bool] | None, grace: float = 5.0) -> int:
    """``proc``'s exit status; when ``stop()`` turns true first, its process group gets SIGTERM, then
    SIGKILL after ``grace`` seconds."""
    if stop is None:
        return proc.wait()
    while True:
        try:
            return proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            if not stop():
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return -signal.SIGTERM
