"""The launcher of one job attempt, started by the cluster's scheduler on the head node.

It pulls the job's container image and runs job preparation once per machine of the nodes the scheduler
assigned, then the ranks (mpirun, or the command alone for a custom toolkit), and leaves its outcome in
``result.json`` in its node-local job folder and in the job's run folder on the share (with the attempt's
tag, for a scheduler whose disk is full or whose database was lost). It writes nothing the scheduler owns:
the scheduler alone records states on the share.
Its whole environment — and so mpirun's, every rank's and their children's — carries the job's tag.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shlex
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from ..agent import client as agent
from ..common import (
    TAG_VAR,
    hostfile_text,
    job_env,
    load,
    load_or_none,
    rank_node_ids,
    read_tail,
    try_append,
    write_json_atomic,
)
from ..policy.toolkits import hostfile_slots
from ..protocol.launch import Assignment, LaunchConfig, Phase, Result, given
from ..protocol.paths import ASSIGNMENT_RECORD, PHASE_RECORD, RESULT_RECORD, SECRETS_RECORD
from .containers import PULL_FAILED, PULL_FAILED_PREFIX, PullError
from .forked import ForkedRank, fork_rank
from .rank import run_prep
from .world import World

# what a custom command on another node must get from the launcher (the rest comes from launch.json)
PASSED_TO_REMOTE = (
    "BATCHAI_JOB_TAG",
    "BATCHAI_JOB_NODES",
    "BATCHAI_RANK_NODES",
    "AZ_BATCHAI_JOB_RESTART_COUNT",
    "PYTHONUNBUFFERED",
    "BATCHAI_NODE_ADDRESSES",
    "BATCHAI_MASTER_PORT",
)
TERM_GRACE = 10.0


PORT_FLOOR = 20000  # the job's ports are picked from here up to the kernel's ephemeral range


def ephemeral_floor() -> int:
    """The first port the kernel hands to outgoing connections (Linux's ``ip_local_port_range``)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _all_free(base: int, count: int) -> bool:
    held: list[socket.socket] = []
    try:
        for port in range(base, base + count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        for s in held:
            s.close()


def free_port(count: int = 1) -> int:
    """The first of ``count`` consecutive TCP ports free on this node now: the rendezvous port of torch,
    and TF's task ports (the first port plus the rank). Taken below the ephemeral range, where no outgoing
    connection picks one of them meanwhile; a port the kernel chooses when none is found there."""
    top = ephemeral_floor() - count
    rng = random.SystemRandom()
    for _ in range(64):
        if top <= PORT_FLOOR:
            break
        base = rng.randrange(PORT_FLOOR, top)
        if _all_free(base, count):
            return base
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class Launcher:
    def __init__(self, job_dir: str, world: World | None = None) -> None:
        self.job_dir = job_dir
        # the mark that this attempt's launcher began (its tag in phase.json), before it reads anything: a
        # launcher adopted by a restarted scheduler that exits without it never ran the job (recovery.py)
        self.phase("preparing")
        self.world = world  # mpirun and shims its spare started ahead (world.py), used if the job fits
        self.assignment: Assignment = load(os.path.join(job_dir, ASSIGNMENT_RECORD))
        self.config_path: str = self.assignment["launch"]
        self.cfg: LaunchConfig = load(self.config_path)
        self.nodes: list[dict[str, Any]] = self.assignment["nodes"]
        self.secrets: dict[str, str] = load_or_none(os.path.join(job_dir, SECRETS_RECORD)) or {}
        self.proc: subprocess.Popen[bytes] | ForkedRank | agent.AgentRank | None = None
        self.stopping: int | None = None  # the signal the scheduler sent, once it asks the job to stop

    # -- records
    def log(self, line: str) -> None:
        for node in self.nodes:
            try_append(os.path.join(self.cfg["stdouterr_dir"], f"execution-{node['id']}.log"), line)

    def phase(self, name: str) -> None:
        write_json_atomic(
            os.path.join(self.job_dir, PHASE_RECORD),
            Phase(phase=name, pid=os.getpid(), tag=os.environ.get(TAG_VAR)),
            sync=False,
        )

    def on_signal(self, signum: int, _frame: Any) -> None:
        self.stopping = signum

    # -- steps
    def node_command(self, node: dict[str, Any], argv: list[str]) -> list[str]:
        ssh = self.cfg.get("ssh_command")
        if ssh is None:
            return argv
        return [*ssh, node["address"], shlex.join(argv)]

    def prepare_nodes(self) -> str | None:
        """Job preparation once per distinct machine, in parallel. Returns a failure reason or None."""
        firsts: dict[str, dict[str, Any]] = {}
        for node in self.nodes:
            firsts.setdefault(node["machine"], node)
        me = [self.cfg["python"], "-S", self.assignment["node_main"], "prep", self.config_path]
        secrets = json.dumps(self.secrets).encode()

        def one(node: dict[str, Any]) -> tuple[str, int, str]:
            if self.cfg.get("ssh_command") is None:  # every node is this machine: no process to start
                try:
                    stop = lambda: self.stopping is not None  # noqa: E731
                    return node["id"], run_prep(self.config_path, node["id"], self.secrets, stop), ""
                except PullError as exc:
                    return node["id"], PULL_FAILED, str(exc)
                except OSError as exc:
                    return node["id"], 1, str(exc)
            try:
                return self.prep_by_agent(node)
            except agent.Unavailable:
                pass  # no agent there: over SSH, as before
            argv = self.node_command(node, [*me, node["id"]])
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            assert proc.stdin is not None
            try:
                proc.stdin.write(secrets)  # never on a command line
                proc.stdin.close()
            except OSError:
                pass
            while True:
                try:
                    proc.wait(timeout=0.02)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self.stopping is not None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return node["id"], -9, ""
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            return node["id"], proc.returncode, err

        import concurrent.futures  # only here: the launcher starts with every job

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(firsts)) as pool:
            results = list(pool.map(one, firsts.values()))
        if self.stopping is not None:
            return None
        failed = [(n, c, e) for n, c, e in results if c != 0]
        for node_id, _, err in failed:
            if err:
                try_append(os.path.join(self.cfg["stdouterr_dir"], f"stderr-job_prep-{node_id}.txt"), err)
        pulls = pull_failures(failed)
        if pulls:
            return pulls
        if failed and not self.cfg.get("job_preparation"):
            return "could not set up the job's directories on " + ", ".join(n for n, _, _ in failed)
        if failed:
            return "job preparation failed on " + ", ".join(f"{n} (exit code {c})" for n, c, _ in failed)
        return None

    def agent_request(self, op: str, **fields: Any) -> dict[str, Any]:
        return {"op": op, "node_main": self.assignment["node_main"], "config": self.config_path, **fields}

    def prep_by_agent(self, node: dict[str, Any]) -> tuple[str, int, str]:
        """Job preparation through the node's agent (no SSH session, no Python start-up); raises
        ``agent.Unavailable`` when there is none to take it (nothing ran)."""
        request = self.agent_request(
            "prep", node=node["id"], env={TAG_VAR: os.environ.get(TAG_VAR, "")}, secrets=self.secrets
        )
        conn = agent.Connection(given(self.cfg["ssh_command"], "ssh_command"), node["address"])
        try:
            conn.send(request)
            while True:
                if self.stopping is not None:
                    return node["id"], -9, ""  # closing the connection stops it there
                answer = conn.receive(0.02)
                if answer is None:
                    continue
                if answer.get("ok") is False and answer.get("error") in agent.SAFE_REFUSALS:
                    raise agent.Unavailable(str(answer.get("message")))
                if not answer.get("ok"):
                    return node["id"], 1, str(answer.get("message"))
                return node["id"], int(answer["code"]), str(answer.get("error") or "")
        except agent.Lost as exc:
            return node["id"], 255, f"the node agent of {node['id']} was lost during job preparation: {exc}"
        finally:
            conn.close()

    def rank_by_agent(self, env: dict[str, str]) -> agent.AgentRank | None:
        """The custom command's shim started by the first node's agent, or None when there is none
        (nothing started: SSH does it). ``agent.Lost``: it may have started, so nothing is tried again."""
        carried = {k: env[k] for k in PASSED_TO_REMOTE if k in env}
        request = self.agent_request("rank", env=carried, secrets=self.secrets)
        try:
            return agent.start_rank(
                given(self.cfg["ssh_command"], "ssh_command"), self.nodes[0]["address"], request
            )
        except agent.Unavailable:
            return None

    def mpirun_via_agents(self, argv: list[str]) -> list[str]:
        """mpirun starting its daemons through the nodes' agents (agent/rsh.py) instead of ``ssh -F
        CONFIG``, when asked (``BATCHAI_NODE_AGENT_MPI=1`` in the cluster's env) and the job's nodes have
        agents; its line as written otherwise. Not by default yet: ``rsh`` waits on its agent without the
        beats a rank's launcher counts, so a stopped agent would hold mpirun at its end (docs/ssh.md)."""
        ssh = self.cfg.get("ssh_command")
        if os.environ.get("BATCHAI_NODE_AGENT_MPI") != "1":
            return argv
        if not ssh or len(ssh) != 3 or ssh[:2] != ["ssh", "-F"]:
            return argv
        if not any(os.path.exists(agent.forward_path(ssh, n["address"])) for n in self.nodes):
            return argv
        words = [sys.executable, "-S", self.assignment["node_main"], "rsh", ssh[2]]
        if any(not w or any(c.isspace() for c in w) for w in words):
            return argv  # mpirun splits its agent's line on white space
        for i in range(len(argv) - 1):
            if argv[i] == "plm_rsh_agent" and argv[i + 1] == shlex.join(ssh):
                argv[i + 1] = " ".join(words)
        return argv

    def launch_argv(self, env: dict[str, str]) -> tuple[list[str], bytes | None]:
        """The command that starts the ranks, and what it reads on stdin.

        A custom toolkit's command runs on the job's first node: over ssh when the nodes are other
        machines, with the job's own variables (the tag among them) in an ``env`` prefix and the secrets
        on stdin, never on a command line.
        """
        if self.cfg["toolkit"] != "custom":
            return self.mpirun_via_agents(list(self.cfg["mpirun_argv"])), None
        shim = [self.cfg["python"], "-S", self.assignment["node_main"], "rank", self.config_path]
        if self.cfg.get("ssh_command") is None:
            return shim, None
        carried = {k: env[k] for k in PASSED_TO_REMOTE if k in env}
        remote = ["env", *(f"{k}={v}" for k, v in sorted(carried.items())), *shim, "--secrets-on-stdin"]
        return self.node_command(self.nodes[0], remote), json.dumps(self.secrets).encode()

    def run_ranks(self) -> tuple[int | None, str | None]:
        ranks = self.cfg["ranks_per_node"]
        hostfile = self.cfg["hostfile"]
        write_json_atomic(hostfile + ".json", self.nodes, sync=False)  # which nodes this attempt ran on
        with open(hostfile, "w", encoding="utf-8") as f:
            f.write(hostfile_text(self.nodes, hostfile_slots(self.cfg["toolkit"], ranks)))
        env = job_env(self.cfg, self.secrets)
        env["BATCHAI_RANK_NODES"] = ",".join(rank_node_ids(self.nodes, ranks))
        env["BATCHAI_JOB_NODES"] = ",".join(n["id"] for n in self.nodes)
        env["AZ_BATCHAI_JOB_RESTART_COUNT"] = str(self.assignment.get("attempt", 0))
        env["BATCHAI_NODE_ADDRESSES"] = ",".join(n["address"] for n in self.nodes)
        env["BATCHAI_MASTER_PORT"] = str(free_port(sum(int(n) for n in ranks)))
        notice = None
        if self.cfg["toolkit"] not in ("horovod", "custom", "custommpi"):
            from ..policy import toolkits

            notice = toolkits.backend_notice(self.cfg["toolkit"], self.cfg.get("toolkit_settings") or {})
        if notice:
            try_append(os.path.join(self.cfg["stdouterr_dir"], "stderr.txt"), notice)
        env.setdefault("PYTHONUNBUFFERED", "1")
        out_dir = self.cfg["stdouterr_dir"]
        self.log(
            f"launching {sum(ranks)} process(es) on {', '.join(n['id'] for n in self.nodes)}"
            f" (attempt {self.assignment.get('attempt', 0)})"
        )
        with (
            open(os.path.join(out_dir, "stdout.txt"), "ab") as out,
            open(os.path.join(out_dir, "stderr.txt"), "ab") as err,
        ):
            argv, feed = self.launch_argv(env)
            world = self.take_world(env, out.name, err.name)
            remote_custom = self.cfg["toolkit"] == "custom" and self.cfg.get("ssh_command") is not None
            try:
                self.proc = self.rank_by_agent(env) if remote_custom else None
            except (agent.Lost, RuntimeError) as exc:
                return None, f"the job's command could not be started on {self.nodes[0]['id']}: {exc}"
            if world is not None:
                self.proc = world.proc  # no mpirun or Python start-up in the hand-off
            elif self.proc is not None:
                feed = None  # the agent gave the shim its secrets
            elif self.cfg["toolkit"] == "custom" and self.cfg.get("ssh_command") is None:
                self.proc = fork_rank(self.config_path, env, self.cfg["wd"], out, err)  # no new Python
            else:
                self.proc = subprocess.Popen(
                    argv,
                    cwd=self.cfg["wd"],
                    env=env,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.PIPE if feed is not None else subprocess.DEVNULL,
                    start_new_session=True,
                )
            if feed is not None and self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.write(feed)
                    self.proc.stdin.close()
            local = isinstance(self.proc, (subprocess.Popen, ForkedRank))  # a child of this process
            exited = ExitWatch(self.proc.pid if local else None)
            while True:
                exited.wait(0.02)
                polled = self.proc.poll()
                if polled is not None:
                    code = polled
                    break
                if self.stopping is not None:
                    self.stop_ranks()
                    code = self.proc.wait()
                    break
            exited.close()
            if world is not None:  # mpirun's own words, where explain() and the user read them
                err.write(world.mpirun_output())
                err.flush()
                world.remove()
        if isinstance(self.proc, agent.AgentRank) and self.proc.lost:  # its agent died meanwhile
            code = self.recorded_exit(code)
            if code == 255 and self.stopping is None:
                node = self.nodes[0]
                if not self.reachable(node):  # named as find_culprit names a silent node: a lost node
                    return None, f"node {node['id']} stopped answering (the job's command there ended unseen)"
                return None, f"the node agent of {node['id']} was lost while the job's command ran there"
        return code, self.explain(code)

    def take_world(self, env: dict[str, str], stdout: str, stderr: str) -> World | None:
        """The pre-started world, handed this job, when the job fits it and every shim waits; otherwise
        it is ended before any shim got the job, and the job's own mpirun starts as usual."""
        world, self.world = self.world, None
        if world is None:
            return None
        if world.fits(self.cfg, self.nodes) and world.ready(stop=lambda: self.stopping is not None):
            self.log(f"the job runs in the MPI world started ahead (mpirun pid {world.proc.pid})")
            job = {"config": self.config_path, "env": env, "wd": self.cfg["wd"]}
            world.go({**job, "stdout": stdout, "stderr": stderr})
            return world
        world.end()
        return None

    def recorded_exit(self, code: int) -> int:
        """The custom command's exit code as its shim recorded it in the node's execution log (its
        agent, which would have reported it, was lost), as the shim's own exit code gives it; else
        ``code``."""
        node = self.nodes[0]["id"]
        how = rank_events(self.cfg["stdouterr_dir"], self.nodes[:1]).get((node, "0"), {}).get("how", "")
        kind, _, number = how.partition(" ")
        if number.isdigit():
            return int(number) if kind == "code" else 128 + int(number)
        return code

    def stop_ranks(self) -> None:
        assert self.proc is not None
        if isinstance(self.proc, agent.AgentRank):
            self.proc.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.signal(signal.SIGKILL)
            return
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

    # -- why it failed
    def explain(self, code: int) -> str | None:
        """The rank that failed for its own reason, else the node that went silent, else mpirun's word."""
        if code == 0 or self.stopping is not None:
            return None
        what = "mpirun" if self.cfg["toolkit"] != "custom" else "the job's command"
        if code < 0 and what == "mpirun":  # a signal ended mpirun itself: the ranks' ends follow from it
            return f"mpirun was killed by signal {-code} (the job's ranks were stopped with it)"
        culprit = find_culprit(self.cfg["stdouterr_dir"], self.nodes, reachable=self.reachable)
        if culprit:
            return f"{culprit} ({what} exited with code {code}; the full output is in stderr.txt)"
        tail = read_tail(os.path.join(self.cfg["stdouterr_dir"], "stderr.txt"))
        for line in tail:
            if "mpirun noticed that process rank" in line:
                return line.strip()
        errors = [ln.strip() for ln in tail if "Error" in ln or "error:" in ln]
        reason = f"{what} exited with code {code}"
        return f"{reason}: {errors[-1][:400]}" if errors else reason

    def reachable(self, node: dict[str, Any]) -> bool:
        if self.cfg.get("ssh_command") is None:
            return True
        argv = [
            *given(self.cfg["ssh_command"], "ssh_command"),
            "-o",
            "ControlPath=none",
            "-o",
            "ConnectTimeout=5",
            node["address"],
            "true",
        ]
        try:
            return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    # -- the attempt
    def main(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        for note in self.cfg.get("notes") or []:  # what the backend left out, said where the user looks
            with (
                contextlib.suppress(OSError),
                open(os.path.join(self.cfg["stdouterr_dir"], "stderr.txt"), "a", encoding="utf-8") as err,
            ):
                err.write(f"note: {note}\n")
            self.log(f"note: {note}")
        result = Result(exit_code=None, reason=None)
        try:
            reason = self.prepare_nodes()
            if reason is not None:
                result["reason"] = reason
            elif self.stopping is None:
                self.phase("running")
                code, reason = self.run_ranks()
                result["exit_code"], result["reason"] = code, reason
        except Exception as exc:  # the result must say why, whatever broke
            result["reason"] = f"job launcher error: {exc!r}"
        if self.world is not None:  # the job never reached its ranks: its pre-started world is not used
            self.world.end()
        result["stopped_by_signal"] = self.stopping
        result["tag"] = os.environ.get(TAG_VAR)
        self.leave(result)
        return 0

    def leave(self, result: Result) -> None:
        """The outcome, in the node-local job folder and in the run folder on the share: a scheduler whose
        own disk is full, or that lost its database, still reads it there (matched by the tag)."""
        kept = False
        for folder in (self.job_dir, self.cfg.get("run_dir")):
            if folder:
                try:
                    write_json_atomic(os.path.join(folder, RESULT_RECORD), result)
                    kept = True
                except OSError as exc:
                    self.log(f"could not write the job's result to {folder}: {exc}")
        if not kept:
            raise SystemExit(f"the job's result could not be written anywhere: {result}")


class ExitWatch:
    """Wakes the moment a child of this process exits (a pidfd), not at the next tick of a polling
    loop; without pidfds (older kernels), or for a process that is not our child (None), it sleeps the
    tick out."""

    def __init__(self, pid: int | None) -> None:
        self.fd: int | None = None
        if pid is not None:
            with contextlib.suppress(AttributeError, OSError):
                self.fd = os.pidfd_open(pid)

    def wait(self, timeout: float) -> None:
        if self.fd is None:
            time.sleep(timeout)
        else:
            select.select([self.fd], [], [], timeout)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def pull_failures(failed: list[tuple[str, int, str]]) -> str | None:
    """The reason of a job whose image could not be pulled: each distinct engine message, once."""
    found: list[str] = []
    for _, code, err in failed:
        if code != PULL_FAILED:
            continue
        lines = [line for line in err.splitlines() if line.startswith(PULL_FAILED_PREFIX)]
        if lines and lines[-1] not in found:
            found.append(lines[-1])
    return "; ".join(found) or None


def rank_events(stdouterr_dir: str, nodes: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    """(node, rank) → {"start": stamp, "end": stamp, "how": "code 3" | "signal 15", "sent": "15"}."""
    events: dict[tuple[str, str], dict[str, str]] = {}
    for node in nodes:
        for line in read_tail(os.path.join(stdouterr_dir, f"execution-{node['id']}.log")):
            stamp, _, rest = line.partition(" ")
            if not rest.startswith("rank "):
                continue
            rank, _, what = rest[len("rank ") :].partition(" ")
            entry = events.setdefault((node["id"], rank), {})
            if what.startswith("starting "):
                entry.clear()
                entry["start"] = stamp
            elif what.startswith("said: "):
                entry["said"] = what[len("said: ") :]
            elif what.startswith("exited with "):
                how, _, sent = what[len("exited with ") :].partition(" after it was sent signal ")
                entry.update(end=stamp, how=how, sent=sent)
    return events


def find_culprit(stdouterr_dir: str, nodes: list[dict[str, Any]], *, reachable: Any) -> str | None:
    """Name the first rank that failed for its own reason.

    A rank that exited non-zero without having been sent a signal failed by itself; the earliest such
    one is the culprit. Otherwise a rank that started and never logged its end lost its rank shim or its
    node (named, with whether the node still answers). Ranks that mpirun stopped during its cleanup
    (sent SIGTERM) are named only when nothing else explains the failure.
    """
    events = rank_events(stdouterr_dir, nodes)
    own = sorted(
        (e["end"], node, rank, e["how"], e.get("said"))
        for (node, rank), e in events.items()
        if "end" in e and not e.get("sent") and e["how"] != "code 0"
    )
    if own:
        _, node, rank, how, said = own[0]
        return f"rank {rank} on node {node} exited with {how}" + (f": {said}" if said else "")
    by_id = {n["id"]: n for n in nodes}
    silent = sorted((e["start"], node, rank) for (node, rank), e in events.items() if "end" not in e)
    hup = sorted((e["end"], node, rank) for (node, rank), e in events.items() if e.get("sent") in ("1", "9"))
    for _, node, rank in silent + hup:
        if not reachable(by_id.get(node, {"id": node, "address": node})):
            return f"node {node} stopped answering (rank {rank} there ended without an exit code)"
    if silent:
        _, node, rank = silent[0]
        return (
            f"rank {rank} on node {node} ended without reporting an exit (the rank's shim process was killed)"
        )
    stopped = sorted(
        (e["end"], node, rank, e["how"])
        for (node, rank), e in events.items()
        if "end" in e and e["how"] != "code 0"
    )
    if stopped:
        _, node, rank, how = stopped[0]
        return f"rank {rank} on node {node} exited with {how}"
    return None
