"""A real Slurm on this machine for the tests: munged, slurmctld and one slurmd (Debian's slurm-wlm).

Everything lives in one temporary folder (configuration, keys, state, spool, logs, pid files) and on
free loopback ports, so the daemons touch nothing of the machine's own Slurm or munge set-up. Needs root
(slurmd runs jobs as their submitting user) and the binaries of ``apt-get install slurm-wlm munge``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "srun")
PARTITION = "batchai"
CPUS = 2


def missing_binaries() -> list[str]:
    found = {b: shutil.which(b) or shutil.which(b, path="/usr/sbin:/sbin") for b in BINARIES}
    return [b for b, path in found.items() if path is None]


def skip_reason() -> str | None:
    """Why the real-Slurm tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "the Slurm daemons need root (slurmd starts jobs as their user)"
    missing = missing_binaries()
    if missing:
        return f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "the munge user does not exist (apt-get install munge)"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sbin(name: str) -> str:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or name


@dataclass
class SlurmCluster:
    """The running daemons; ``env`` points Slurm's commands at this cluster (``SLURM_CONF``)."""

    root: Path
    conf: Path
    node: str
    partition: str = PARTITION
    cpus: int = CPUS
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def command(
        self, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            env={**os.environ, **self.env},
        )

    def log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def node_state(self) -> str:
        """The nodes' state (one word when they all share it, else each node's)."""
        lines = self.command("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout.splitlines()
        states = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
        if len(set(states.values())) == 1 and len(states) == len(self.node.split(",")):
            return next(iter(states.values()))
        return " ".join(f"{n}={st}" for n, st in sorted(states.items()))

    def wait_idle(self, timeout: float = 60) -> None:
        """Until the node reads idle (jobs of earlier tests have left it)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.node_state()
            if state == "idle":
                return
            time.sleep(0.3)
        raise RuntimeError(f"slurm node {self.node} not idle after {timeout:g}s (state {state!r})")

    def cancel_all(self) -> None:
        self.command("scancel", "--partition", self.partition, check=False)


def slurm_conf(
    root: Path,
    node: str,
    *,
    ctld_port: int,
    slurmd_port: int,
    munge_socket: Path,
    nodes: dict[str, str] | None = None,
    ctld: tuple[str, str] | None = None,
) -> str:
    """slurm.conf for one slurmd ``node`` on 127.0.0.1, or for ``nodes`` (name → NodeAddr, one slurmd
    each, files named by %n) with slurmctld on ``ctld`` (name, address)."""
    nodes = nodes or {node: "127.0.0.1"}
    ctld_name, ctld_addr = ctld or (node, "127.0.0.1")
    names = ",".join(nodes)
    return "\n".join(
        [
            "ClusterName=batchaitest",
            f"SlurmctldHost={ctld_name}({ctld_addr})",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}" + ("/%n" if len(nodes) > 1 else ""),
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd'}" + ("-%n" if len(nodes) > 1 else "") + ".pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd'}" + ("-%n" if len(nodes) > 1 else "") + ".log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MinJobAge=600",
            "KillWait=2",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            *(f"NodeName={n} NodeAddr={addr} CPUs={CPUS} State=UNKNOWN" for n, addr in nodes.items()),
            f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _wait(check: Callable[[], bool], what: str, timeout: float, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for name, proc in cluster.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode} before {what}:\n{cluster.log(name)}"
                )
        time.sleep(0.2)
    logs = "\n".join(f"--- {d}\n{cluster.log(d)[-3000:]}" for d in dict.fromkeys(["munged", *cluster.procs]))
    raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}\n{logs}")


# How a daemon starts somewhere else (a namespace node): (where, argv, Popen options) → the process, and
# how it is stopped. ``where`` is the slurmd's node name, or None for slurmctld.
Spawn = Callable[[str | None, list[str], dict[str, Any]], "subprocess.Popen[bytes]"]
Stop = Callable[["subprocess.Popen[bytes]"], None]


@dataclass
class Placement:
    """Where the daemons run: slurmd ``nodes`` (name → NodeAddr), slurmctld on ``ctld`` (name, address),
    every file under ``parent`` (a folder all of them see)."""

    nodes: dict[str, str]
    ctld: tuple[str, str]
    parent: Path
    spawn: Spawn
    stop: Stop


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def start_cluster(timeout: float = 60, *, placement: Placement | None = None) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and one slurmd on this machine (or as ``placement`` says: one slurmd per
    node); stop them (and any job left) on exit."""
    root = Path(tempfile.mkdtemp(prefix="batchai-slurm-", dir=placement.parent if placement else None))
    root.chmod(0o755)  # munged (as munge) must traverse to its own folder
    munge = pwd.getpwnam("munge")
    munge_dir = root / "munge"
    munge_dir.mkdir(mode=0o755)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (munge_dir, key):
        os.chown(path, munge.pw_uid, munge.pw_gid)
    for sub in ("state", "spool", "run", "log"):
        (root / sub).mkdir()
    (root / "log").chmod(0o777)
    node = socket.gethostname().split(".")[0]
    nodes = placement.nodes if placement else {node: "127.0.0.1"}
    ctld = placement.ctld if placement else (node, "127.0.0.1")
    munge_socket = munge_dir / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(
        slurm_conf(root, node, ctld_port=free_port(), slurmd_port=free_port(), munge_socket=munge_socket,
                   nodes=nodes, ctld=ctld)
    )  # fmt: skip
    cluster = SlurmCluster(root=root, conf=conf, node=",".join(nodes))
    spawn: Spawn = (
        placement.spawn if placement else (lambda _where, argv, options: subprocess.Popen(argv, **options))
    )
    stop: Stop = placement.stop if placement else _stop
    env = {**os.environ, **cluster.env}
    try:
        cluster.procs["munged"] = subprocess.Popen(
            [
                sbin("munged"),
                "--foreground",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={munge_dir / 'munged.pid'}",
                f"--seed-file={munge_dir / 'munged.seed'}",
                f"--log-file={root / 'log' / 'munged.log'}",
            ],
            user=munge.pw_uid,
            group=munge.pw_gid,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(root / "log" / "munged.err", "wb"),  # noqa: SIM115 - the child keeps it
        )
        _wait(munge_socket.exists, "munged's socket", timeout, cluster)
        daemons: list[tuple[str, str | None, list[str]]] = [("slurmctld", None, ["-i"])]
        daemons += [("slurmd" if len(nodes) == 1 else f"slurmd-{n}", n, ["-N", n]) for n in nodes]
        for name, where, extra in daemons:
            cluster.procs[name] = spawn(
                where,
                [sbin(name.split("-")[0]), "-D", "-f", str(conf), *extra],
                {
                    "env": env,
                    "stdin": subprocess.DEVNULL,
                    "stdout": subprocess.DEVNULL,
                    "stderr": open(root / "log" / f"{name}.err", "wb"),  # noqa: SIM115
                },
            )
        _wait(lambda: cluster.node_state() == "idle", f"nodes {cluster.node} idle in sinfo", timeout, cluster)
        yield cluster
    finally:
        if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
            cluster.cancel_all()
        for name in [n for n in cluster.procs if n.startswith("slurmd")] + ["slurmctld", "munged"]:
            proc = cluster.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            (_stop if name == "munged" else stop)(proc)
        shutil.rmtree(root, ignore_errors=True)
