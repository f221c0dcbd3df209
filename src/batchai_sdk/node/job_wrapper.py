"""The job wrapper: uploaded to the share with every job and run by the nodes' own Python.

Standard library only — nodes need not have batchai_sdk installed. Three modes:

``wrapper CONFIG``  on the head node, detached: claim nodes, run job preparation once per machine, run
                    the ranks (mpirun, or the command alone for custom toolkits), record the status.
``prep CONFIG NODE`` on a node: make the job's node-local directories, run the job preparation command.
``rank CONFIG``     one process of the job, started by mpirun: set the rank's variables, expand ``$VARS``
                    in the script path and args on the node, run the script, log to execution-<node>.log.

The status record (``status.json``) is replaced atomically; readers never see half a record.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from typing import Any

POLL = 0.5
TERM_GRACE = 10.0
CLAIM_RETRY = 1.0


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def load(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json_atomic(path: str, data: Any) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{now()} {line}\n")


def job_env(cfg: dict[str, Any]) -> dict[str, str]:
    """The environment of job preparation and ranks: ours + the job's + its secrets, values expanded."""
    env = dict(os.environ)
    env.update(cfg["env"])
    secret_file = cfg.get("secret_env_file")
    if secret_file and os.path.exists(secret_file):
        env.update(load(secret_file))
    for key in cfg.get("expand_env", []):
        if key in env:
            env[key] = expand(env[key], env)
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` from ``env``; unknown names are left as written (like os.path.expandvars)."""
    saved = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(env)
        return os.path.expandvars(value)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def hostfile_text(nodes: list[dict[str, Any]], ranks: list[int]) -> str:
    """``address slots=N`` per run of nodes on one address; ranks fill lines in order (-map-by slot)."""
    lines: list[list[Any]] = []
    for node, count in zip(nodes, ranks, strict=True):
        if count <= 0:
            continue
        if lines and lines[-1][0] == node["address"]:
            lines[-1][1] += count
        else:
            lines.append([node["address"], count])
    return "".join(f"{addr} slots={n}\n" for addr, n in lines)


def rank_node_ids(nodes: list[dict[str, Any]], ranks: list[int]) -> list[str]:
    out: list[str] = []
    for node, count in zip(nodes, ranks, strict=True):
        out.extend([node["id"]] * count)
    return out


# --------------------------------------------------------------------------------------------- node side
def make_node_dirs(cfg: dict[str, Any]) -> None:
    os.makedirs(cfg["env"]["AZ_BATCHAI_JOB_TEMP"], exist_ok=True)
    link = cfg.get("mount_link")
    if link:
        os.makedirs(os.path.dirname(link["path"]), exist_ok=True)
        try:
            os.symlink(link["target"], link["path"])
        except FileExistsError:
            pass


def run_prep(config_path: str, node: str) -> int:
    cfg = load(config_path)
    make_node_dirs(cfg)
    if not cfg.get("job_preparation"):
        return 0
    env = job_env(cfg)
    out_dir = cfg["stdouterr_dir"]
    log = os.path.join(out_dir, f"execution-{node}.log")
    append(log, f"job preparation started on {socket.gethostname()}")
    with (
        open(os.path.join(out_dir, f"stdout-job_prep-{node}.txt"), "ab") as out,
        open(os.path.join(out_dir, f"stderr-job_prep-{node}.txt"), "ab") as err,
    ):
        code = subprocess.call(
            ["/bin/sh", "-c", cfg["job_preparation"]], cwd=cfg["wd"], env=env, stdout=out, stderr=err
        )
    append(log, f"job preparation exited with code {code}")
    return code


def relay_lines(source: Any, fd: int) -> None:
    """Copy a rank's output to ``fd`` in whole lines, one write each.

    mpirun forwards each write of each rank as it comes; an unbuffered Python writes a line's text and its
    newline separately, so without this two ranks' lines run into one another.
    """
    pending = b""
    while True:
        chunk = os.read(source.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
        if cut >= 0:
            os.write(fd, pending[: cut + 1])
            pending = pending[cut + 1 :]
        elif len(pending) >= 65536:
            os.write(fd, pending)
            pending = b""
    if pending:
        os.write(fd, pending)


def container_runtime() -> str | None:
    """The path of docker or podman when its engine answers (a client alone is not enough)."""
    for tool in ("docker", "podman"):
        path = shutil.which(tool)
        if not path:
            continue
        try:
            ok = subprocess.run([path, "info"], capture_output=True, timeout=20, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return path
    return None


def container_env(cfg: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """What a rank in a container gets: the job's variables and the MPI runtime's, not the host's PATH."""
    names = set(cfg["env"]) - {"PATH"} | {"AZ_BATCHAI_TASK_INDEX", "PYTHONUNBUFFERED"}
    names |= {k for k in env if k.startswith(("OMPI_", "PMIX_", "OPAL_", "HOROVOD_", "NCCL_"))}
    secret_file = cfg.get("secret_env_file")
    if secret_file and os.path.exists(secret_file):
        names |= set(load(secret_file))
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


def run_rank(config_path: str) -> int:
    cfg = load(config_path)
    make_node_dirs(cfg)
    env = job_env(cfg)
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
    nodes = env.get("BATCHAI_RANK_NODES", "").split(",")
    node = nodes[rank] if rank < len(nodes) and nodes[rank] else cfg["head"]
    order = [n["id"] for n in cfg["job_nodes"]] if cfg.get("job_nodes") else [node]
    env["AZ_BATCHAI_TASK_INDEX"] = str(order.index(node) if node in order else 0)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if cfg["toolkit"] == "horovod":
        argv = [cfg["python"], expand(cfg["script"], env)] + [expand(a, env) for a in cfg["args"]]
    else:
        argv = ["/bin/sh", "-c", cfg["command_line"]]
    image = cfg.get("container_image")
    log = os.path.join(cfg["stdouterr_dir"], f"execution-{node}.log")
    env_file = None
    if image:
        runtime = container_runtime()
        if runtime is None:
            warning = (
                f"warning: containerSettings asks for image {image} but no container runtime (docker, "
                f"podman) answers on {socket.gethostname()}: rank {rank} runs on the host\n"
            )
            os.write(2, warning.encode())
            append(log, warning.strip())
        else:
            if cfg["toolkit"] == "horovod":
                argv[0] = cfg.get("container_python") or "python"
            env_file = os.path.join(env["AZ_BATCHAI_JOB_TEMP"], f"rank-{rank}.env")
            write_env_file(env_file, container_env(cfg, env))
            mounts = [cfg["share_root"], os.path.dirname(env["AZ_BATCHAI_JOB_TEMP"]), tempfile.gettempdir()]
            argv = container_argv(
                runtime,
                image,
                argv,
                workdir=cfg["wd"],
                mounts=mounts,
                env_file=env_file,
                gpus=int(env.get("AZ_BATCHAI_NUM_GPUS", "0") or 0) > 0,
            )
    append(log, f"rank {rank} starting on {socket.gethostname()} (pid {os.getpid()}): {shlex.join(argv)}")
    child = subprocess.Popen(argv, cwd=cfg["wd"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    relays = [
        threading.Thread(target=relay_lines, args=(child.stdout, 1), daemon=True),
        threading.Thread(target=relay_lines, args=(child.stderr, 2), daemon=True),
    ]
    for t in relays:
        t.start()

    def forward(signum: int, _frame: Any) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    for t in relays:
        t.join(timeout=5)
    if env_file:
        with contextlib.suppress(OSError):
            os.unlink(env_file)
    described = f"signal {-code}" if code < 0 else f"code {code}"
    append(log, f"rank {rank} exited with {described}")
    return 128 - code if code < 0 else code


def heartbeat_age(status: dict[str, Any]) -> float:
    """Seconds since a job's wrapper last wrote its status (0 when it never has)."""
    beat = status.get("heartbeat")
    if not beat:
        return 0.0
    return (datetime.now(timezone.utc) - datetime.fromisoformat(beat)).total_seconds()


def read_tail(path: str, size: int = 65536) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


# --------------------------------------------------------------------------------------------- head side
class Wrapper:
    def __init__(self, config_path: str) -> None:
        self.config_path = config_path
        self.cfg = load(config_path)
        self.status_path = self.cfg["status_path"]
        self.status: dict[str, Any] = load(self.status_path) if os.path.exists(self.status_path) else {}
        self.claimed: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.stop_reason: tuple[str, str] | None = None  # (state, reason)
        self.lock = threading.Lock()
        self.started = time.monotonic()

    # -- records
    def update(self, **fields: Any) -> None:
        with self.lock:
            self.status.update(fields)
            self.status["heartbeat"] = now()
            write_json_atomic(self.status_path, self.status)

    def log(self, line: str) -> None:
        nodes = self.claimed or [{"id": self.cfg["head"]}]
        for node in nodes:
            append(os.path.join(self.cfg["stdouterr_dir"], f"execution-{node['id']}.log"), line)

    def terminate_requested(self) -> bool:
        return os.path.exists(os.path.join(self.cfg["run_dir"], "terminate"))

    def wall_clock_exceeded(self) -> bool:
        limit = self.cfg.get("max_wall_clock_seconds")
        return bool(limit) and time.monotonic() - self.started > float(limit)

    def check_stop(self) -> bool:
        if self.stop_reason is None:
            if self.terminate_requested():
                self.stop_reason = ("terminated", "terminated by the user")
            elif self.wall_clock_exceeded():
                limit = self.cfg["max_wall_clock_seconds"]
                self.stop_reason = (
                    "failed",
                    f"maxWallClockTime of {limit:g}s exceeded; the job was terminated",
                )
        return self.stop_reason is not None

    # -- node claims: a file per node, created with O_EXCL on the share all nodes see
    def claim_path(self, node: dict[str, Any]) -> str:
        return os.path.join(self.cfg["claims_dir"], f"{node['id']}.json")

    def claim_is_stale(self, path: str) -> bool:
        try:
            holder = load(path)
        except (OSError, ValueError):
            return False
        status_path = holder.get("status_path")
        if not status_path or status_path == self.status_path:
            return bool(status_path == self.status_path)
        try:
            status = load(status_path)
        except (OSError, ValueError):
            return True  # the holder's job is gone
        if status.get("state") in ("succeeded", "failed", "terminated"):
            return True
        return heartbeat_age(status) > float(self.cfg.get("heartbeat_timeout") or 180)

    def try_claim(self, count: int) -> list[dict[str, Any]] | None:
        os.makedirs(self.cfg["claims_dir"], exist_ok=True)
        got: list[dict[str, Any]] = []
        record = json.dumps(
            {"job": self.cfg["job"], "status_path": self.status_path, "since": now(), "phase": "preparing"}
        ).encode()
        for node in self.cfg["nodes"]:
            if len(got) == count:
                break
            path = self.claim_path(node)
            for _ in range(2):
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    if self.claim_is_stale(path):
                        try:
                            os.unlink(path)
                        except FileNotFoundError:
                            pass
                        continue
                    break
                with os.fdopen(fd, "wb") as f:
                    f.write(record)
                got.append(node)
                break
        if len(got) < count:
            for node in got:
                self.release_one(node)
            return None
        return got

    def set_claim_phase(self, phase: str) -> None:
        for node in self.claimed:
            path = self.claim_path(node)
            try:
                holder = load(path)
                holder["phase"] = phase
                write_json_atomic(path, holder)
            except (OSError, ValueError):
                pass

    def release_one(self, node: dict[str, Any]) -> None:
        try:
            os.unlink(self.claim_path(node))
        except FileNotFoundError:
            pass

    def release(self) -> None:
        for node in self.claimed:
            self.release_one(node)

    # -- phases
    def wait_for_nodes(self) -> bool:
        count = self.cfg["node_count"]
        waited = False
        while True:
            if self.check_stop():
                return False
            got = self.try_claim(count)
            if got is not None:
                self.claimed = got
                return True
            if not waited:
                self.log(f"waiting for {count} free node(s) of the cluster")
                waited = True
            time.sleep(CLAIM_RETRY)

    def node_command(self, node: dict[str, Any], argv: list[str]) -> list[str]:
        ssh = self.cfg.get("ssh_command")
        if ssh is None:
            return argv
        return [*ssh, node["address"], shlex.join(argv)]

    def prepare_nodes(self) -> str | None:
        """Job preparation once per distinct machine, in parallel. Returns a failure reason or None."""
        firsts: dict[str, dict[str, Any]] = {}
        for node in self.claimed:
            firsts.setdefault(node["machine"], node)
        me = [self.cfg["python"], self.cfg["wrapper_path"], "prep", self.config_path]

        def one(node: dict[str, Any]) -> tuple[str, int]:
            argv = self.node_command(node, [*me, node["id"]])
            proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
            )
            while proc.poll() is None:
                if self.check_stop():
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return node["id"], -9
                time.sleep(POLL)
            if proc.returncode != 0 and proc.stderr is not None:
                msg = proc.stderr.read().decode(errors="replace").strip()
                if msg:
                    append(os.path.join(self.cfg["stdouterr_dir"], f"stderr-job_prep-{node['id']}.txt"), msg)
            return node["id"], proc.returncode

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(firsts)) as pool:
            results = list(pool.map(one, firsts.values()))
        failed = [(n, c) for n, c in results if c != 0]
        if self.stop_reason:
            return None
        if failed and not self.cfg.get("job_preparation"):
            return "could not set up the job's directories on " + ", ".join(n for n, _ in failed)
        if failed:
            return "job preparation failed on " + ", ".join(f"{n} (exit code {c})" for n, c in failed)
        return None

    def launch_argv(self) -> list[str]:
        if self.cfg["toolkit"] == "custom":
            return [self.cfg["python"], self.cfg["wrapper_path"], "rank", self.config_path]
        return list(self.cfg["mpirun_argv"])

    def run_ranks(self) -> tuple[int, str | None]:
        ranks = self.cfg["ranks_per_node"]
        with open(self.cfg["hostfile"], "w", encoding="utf-8") as f:
            f.write(hostfile_text(self.claimed, ranks))
        env = job_env(self.cfg)
        env["BATCHAI_RANK_NODES"] = ",".join(rank_node_ids(self.claimed, ranks))
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.cfg["job_nodes"] = self.claimed
        write_json_atomic(self.config_path, self.cfg)
        out_dir = self.cfg["stdouterr_dir"]
        argv = self.launch_argv()
        self.log(
            f"launching {len(rank_node_ids(self.claimed, ranks))} process(es) on "
            f"{', '.join(n['id'] for n in self.claimed)}"
        )
        with (
            open(os.path.join(out_dir, "stdout.txt"), "ab") as out,
            open(os.path.join(out_dir, "stderr.txt"), "ab") as err,
        ):
            self.proc = subprocess.Popen(
                argv,
                cwd=self.cfg["wd"],
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            while self.proc.poll() is None:
                if self.check_stop():
                    self.kill_ranks()
                    break
                time.sleep(POLL)
            code = self.proc.wait()
        return code, self.explain(code)

    def kill_ranks(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + TERM_GRACE
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def explain(self, code: int) -> str | None:
        """Why the ranks failed: the first rank that exited badly (from the execution logs), else mpirun's
        own message, else the exit code."""
        if code == 0:
            return None
        what = "mpirun" if self.cfg["toolkit"] != "custom" else "the job's command"
        first = self.first_failed_rank()
        if first:
            return f"{first} ({what} exited with code {code})"
        tail = read_tail(os.path.join(self.cfg["stdouterr_dir"], "stderr.txt"))
        for line in tail:
            if "mpirun noticed that process rank" in line:
                return line.strip()
        errors = [ln.strip() for ln in tail if "Error" in ln or "error:" in ln]
        reason = f"{what} exited with code {code}"
        return f"{reason}: {errors[-1][:400]}" if errors else reason

    def first_failed_rank(self) -> str | None:
        failures: list[tuple[str, str]] = []
        for node in self.claimed:
            path = os.path.join(self.cfg["stdouterr_dir"], f"execution-{node['id']}.log")
            for line in read_tail(path):
                stamp, _, rest = line.partition(" ")
                if rest.startswith("rank ") and " exited with " in rest and not rest.endswith("code 0"):
                    rank, _, how = rest[len("rank ") :].partition(" exited with ")
                    failures.append((stamp, f"rank {rank} on node {node['id']} exited with {how}"))
        return min(failures)[1] if failures else None

    def main(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        os.makedirs(self.cfg["stdouterr_dir"], exist_ok=True)
        self.update(wrapper_pid=os.getpid(), wrapper_host=socket.gethostname())
        done = threading.Event()
        interval = float(self.cfg.get("heartbeat_seconds") or 10)
        # Readers take a job whose heartbeat stops for a dead one (its wrapper was killed, its node died).
        threading.Thread(target=self.heartbeat, args=(done, interval), daemon=True).start()
        try:
            return self.run()
        except Exception as exc:  # the record must say why, whatever broke
            self.update(state="failed", end_time=now(), failure_reason=f"job wrapper error: {exc!r}")
            raise
        finally:
            done.set()
            self.release()

    def heartbeat(self, done: threading.Event, interval: float) -> None:
        while not done.wait(interval):
            self.update()

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_reason = ("terminated", f"job wrapper received signal {signum}")

    def run(self) -> int:
        if not self.wait_for_nodes():
            return self.finish(None)
        self.update(state="running", preparing=True, start_time=now(), nodes=[n["id"] for n in self.claimed])
        reason = self.prepare_nodes()
        if reason or self.stop_reason:
            return self.finish(None, reason)
        self.set_claim_phase("running")
        self.update(preparing=False)
        code, reason = self.run_ranks()
        return self.finish(code, reason)

    def finish(self, code: int | None, reason: str | None = None) -> int:
        if self.stop_reason is not None:
            state, reason = self.stop_reason
        elif reason is not None or (code is not None and code != 0):
            state = "failed"
        else:
            state = "succeeded"
        self.log(f"job {state}" + (f": {reason}" if reason else ""))
        self.update(state=state, exit_code=code, end_time=now(), failure_reason=reason, preparing=False)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "wrapper":
        return Wrapper(argv[1]).main()
    if len(argv) >= 3 and argv[0] == "prep":
        return run_prep(argv[1], argv[2])
    if len(argv) >= 2 and argv[0] == "rank":
        return run_rank(argv[1])
    sys.stderr.write("usage: job_wrapper.py wrapper|rank CONFIG | prep CONFIG NODE\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
