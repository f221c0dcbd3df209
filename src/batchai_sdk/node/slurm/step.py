"""A job's launcher inside its Slurm allocation: the body of the sbatch script.

Standard library only — it runs with the nodes' own Python. Three modes:

``batch CONFIG [--mpi TYPE]``  the batch step (first node of the allocation): status ``running``, job
                               preparation once per node, the ranks, the final status.
``prep CONFIG``               on each node (one task per node): the job's node-local folders, job preparation.
``rank CONFIG``               one process of the job, started by ``srun``: Batch AI's per-rank variables,
                              ``$VARS`` expanded, the script run; a line per start and exit in
                              ``execution-<node>.log``.

``CONFIG`` is the job's launch.json on the share. ``status.json`` is replaced atomically; Slurm's own
state (sacct/squeue) is reconciled by the client for what this cannot write (a job cancelled while
pending, a node lost).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from ..common import append, expand, load, now, script_python, write_json_atomic
from ..common import job_env as common_job_env
from ..job.launcher import free_port
from ..job.rank import FRAMEWORKS, framework_context, make_mount_link
from ..policy import toolkits
from ..protocol.launch import LaunchConfig, given
from ..protocol.records import Reporter, StatusDoc

HEARTBEAT = 10.0


def job_env(cfg: LaunchConfig) -> dict[str, str]:
    env = common_job_env(cfg)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list (``n[01-03,7],login``) as names; ``scontrol show hostnames`` offline."""
    names: list[str] = []
    depth, start = 0, 0
    parts: list[str] = []
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if "[" not in part:
            names.append(part)
            continue
        head, _, rest = part.partition("[")
        ranges, _, tail = rest.partition("]")
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not hi:
                names.extend(expand_hostlist(head + lo + tail))
                continue
            for n in range(int(lo), int(hi) + 1):
                names.extend(expand_hostlist(f"{head}{n:0{len(lo)}d}{tail}"))
    return names


def tasks_per_node(text: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` (``2(x3),1``) as one count per node."""
    counts: list[int] = []
    for item in text.split(","):
        if not item:
            continue
        if "(x" in item:
            n, _, times = item.partition("(x")
            counts.extend([int(n)] * int(times.rstrip(")")))
        else:
            counts.append(int(item))
    return counts


def make_node_dirs(cfg: LaunchConfig, env: dict[str, str]) -> None:
    temp = env.get("AZ_BATCHAI_JOB_TEMP")
    if temp:
        os.makedirs(temp, exist_ok=True)
    make_mount_link(cfg)


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def execution_log(cfg: LaunchConfig, node: str) -> str:
    return os.path.join(cfg["stdouterr_dir"], f"execution-{node}.log")


# ------------------------------------------------------------------------------------------ per node
def run_prep(config_path: str) -> int:
    cfg: LaunchConfig = load(config_path)
    env = job_env(cfg)
    make_node_dirs(cfg, env)
    if not cfg.get("job_preparation"):
        return 0
    node = node_name()
    out_dir = cfg["stdouterr_dir"]
    append(execution_log(cfg, node), f"job preparation started on {socket.gethostname()}")
    with (
        open(os.path.join(out_dir, f"stdout-job_prep-{node}.txt"), "ab") as out,
        open(os.path.join(out_dir, f"stderr-job_prep-{node}.txt"), "ab") as err,
    ):
        code = subprocess.call(
            [*toolkits.SHELL, given(cfg["job_preparation"], "job_preparation")],
            cwd=cfg["wd"],
            env=env,
            stdout=out,
            stderr=err,
        )
    append(execution_log(cfg, node), f"job preparation exited with code {code}")
    return code


def run_rank(config_path: str) -> int:
    cfg: LaunchConfig = load(config_path)
    env = job_env(cfg)
    make_node_dirs(cfg, env)
    rank = int(env.get("SLURM_PROCID", "0"))
    node = node_name()
    env["AZ_BATCHAI_TASK_INDEX"] = env.get("SLURM_NODEID", "0")
    written = [script_python(cfg), given(cfg["script"], "script"), *(cfg.get("args") or [])]
    if cfg["toolkit"] in FRAMEWORKS:  # the framework's own variables, from Slurm's task layout
        layout = tasks_per_node(env.get("SLURM_TASKS_PER_NODE", "")) or [int(env.get("SLURM_NTASKS", "1"))]
        env.setdefault("BATCHAI_NODE_ADDRESSES", node)
        ctx = framework_context(cfg, env, rank, layout)
        assert ctx is not None
        env.update(toolkits.rank_env(ctx))
        written = toolkits.rank_argv(ctx)
    argv = [expand(a, env) for a in written]
    log = execution_log(cfg, node)
    append(log, f"rank {rank} starting on {socket.gethostname()} (pid {os.getpid()}): {argv[0]} {argv[1]}")
    child = subprocess.Popen(argv, cwd=cfg["wd"], env=env)

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    append(log, f"rank {rank} exited with " + (f"signal {-code}" if code < 0 else f"code {code}"))
    return 128 - code if code < 0 else code


# ------------------------------------------------------------------------------------------ batch step
class Batch:
    def __init__(self, config_path: str, mpi: str) -> None:
        self.config_path = config_path
        self.mpi = mpi
        self.cfg: LaunchConfig = load(config_path)
        self.status_path: str = self.cfg["status_path"]
        try:
            loaded = load(self.status_path)
        except (OSError, ValueError):
            loaded = None
        self.status = StatusDoc.from_dict(loaded if isinstance(loaded, dict) else {})
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped: tuple[str, str] | None = None
        self.started = time.monotonic()
        self.nodes = expand_hostlist(os.environ.get("SLURM_JOB_NODELIST", "")) or [node_name()]

    def update(self, **fields: Any) -> None:
        with self.lock:
            self.status = self.status.updated(**fields, heartbeat=now())
            try:
                write_json_atomic(self.status_path, self.status.to_dict())
            except OSError as exc:  # a full/read-only share: keep going, the next write retries
                sys.stderr.write(f"batchai: could not write {self.status_path}: {exc}\n")

    def log(self, line: str) -> None:
        for node in self.nodes:
            append(execution_log(self.cfg, node), line)

    def heartbeat(self, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT):
            self.update()

    def on_signal(self, signum: int, _frame: Any) -> None:
        """scancel, or Slurm's time limit: stop the ranks and say which it was."""
        limit = self.cfg.get("max_wall_clock_seconds")
        if limit and time.monotonic() - self.started >= float(limit) - 1:
            self.stopped = ("failed", f"wall clock limit of {float(limit):g}s exceeded: Slurm ended the job")
        else:
            self.stopped = ("terminated", f"cancelled in Slurm (signal {signum})")
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def write_hostfile(self, env: dict[str, str]) -> None:
        path = env.get("AZ_BATCHAI_MPI_HOST_FILE")
        if not path:
            return
        counts = tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", "")) or [1] * len(self.nodes)
        counts = [*counts, *[0] * (len(self.nodes) - len(counts))]
        # custom / custommpi: every node of the allocation, as Batch AI listed every node of the job
        counts = toolkits.hostfile_slots(self.cfg["toolkit"], counts)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{n} slots={c}\n" for n, c in zip(self.nodes, counts, strict=False))

    def call(self, argv: list[str], env: dict[str, str]) -> int:
        with self.lock:
            if self.stopped:
                return -signal.SIGTERM
            self.proc = subprocess.Popen(argv, cwd=self.cfg["wd"], env=env, start_new_session=True)
        return self.proc.wait()

    def me(self, mode: str) -> list[str]:
        node_main = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "__main__.py")
        return [sys.executable, "-S", node_main, "slurm-job", mode, self.config_path]

    def prepare(self, env: dict[str, str]) -> str | None:
        if len(self.nodes) == 1:
            code = run_prep(self.config_path)
        else:
            n = str(len(self.nodes))
            code = self.call(
                ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", *self.me("prep")], env
            )
        if code == 0:
            return None
        if self.cfg.get("job_preparation"):
            return f"job preparation failed (exit code {code})"
        return f"could not set up the job's directories (exit code {code})"

    def launch_argv(self) -> list[str]:
        if self.cfg["toolkit"] == "horovod" or self.cfg["toolkit"] in FRAMEWORKS:
            ntasks = os.environ.get("SLURM_NTASKS", "1")
            return [
                "srun",
                f"--mpi={self.mpi}",
                f"--ntasks={ntasks}",
                "--kill-on-bad-exit=1",
                *self.me("rank"),
            ]
        return [*toolkits.SHELL, given(self.cfg["command_line"], "command_line")]

    def first_failed_rank(self) -> str | None:
        failures: list[tuple[str, str]] = []
        for node in self.nodes:
            try:
                with open(execution_log(self.cfg, node), encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            for line in lines:
                stamp, _, rest = line.partition(" ")
                if rest.startswith("rank ") and " exited with " in rest and not rest.endswith("code 0"):
                    rank, _, how = rest[len("rank ") :].partition(" exited with ")
                    failures.append((stamp, f"rank {rank} on node {node} exited with {how}"))
        return min(failures)[1] if failures else None

    def main(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, self.on_signal)
        os.makedirs(self.cfg["stdouterr_dir"], exist_ok=True)
        self.update(
            state="running",
            preparing=True,
            start_time=now(),
            nodes=self.nodes,
            slurm_job_id=os.environ.get("SLURM_JOB_ID"),
            reporter=Reporter(host=socket.gethostname(), pid=os.getpid()),
        )
        done = threading.Event()
        threading.Thread(target=self.heartbeat, args=(done,), daemon=True).start()
        try:
            env = job_env(self.cfg)
            reason = self.prepare(env)
            code: int | None = None
            if reason is None and not self.stopped:
                self.update(preparing=False)
                self.write_hostfile(env)
                env["BATCHAI_NODE_ADDRESSES"] = ",".join(self.nodes)  # torch's and TF's rendezvous
                ntasks = os.environ.get("SLURM_NTASKS", "1")
                env["BATCHAI_MASTER_PORT"] = str(free_port(int(ntasks) if ntasks.isdigit() else 1))
                argv = self.launch_argv()
                self.log(f"launching {ntasks} process(es) on {','.join(self.nodes)}")
                code = self.call(argv, env)
                if code < 0:
                    code = 128 - code
                if code != 0 and self.cfg["toolkit"] == "horovod":
                    reason = self.first_failed_rank() or f"srun exited with code {code}"
                elif code != 0:
                    reason = f"the job's command exited with code {code}"
            if self.stopped:
                state, reason = self.stopped
            else:
                state = "failed" if reason else "succeeded"
            self.log(f"job {state}" + (f": {reason}" if reason else ""))
            self.update(state=state, exit_code=code, end_time=now(), failure_reason=reason, preparing=False)
            return 0 if state == "succeeded" else 1
        except Exception as exc:
            self.update(state="failed", end_time=now(), failure_reason=f"job launcher error: {exc!r}")
            raise
        finally:
            done.set()


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "batch":
        mpi = argv[3] if len(argv) >= 4 and argv[2] == "--mpi" else "pmi2"
        return Batch(argv[1], mpi).main()
    if len(argv) >= 2 and argv[0] == "prep":
        return run_prep(argv[1])
    if len(argv) >= 2 and argv[0] == "rank":
        return run_rank(argv[1])
    sys.stderr.write("usage: __main__.py slurm-job batch CONFIG [--mpi TYPE] | prep CONFIG | rank CONFIG\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
