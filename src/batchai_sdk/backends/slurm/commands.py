"""Slurm's commands (sbatch, squeue, sacct, sinfo, scancel, scontrol) run through a Runner on the login
node, their machine-readable output parsed into small records, their failures into typed errors.

Every command line is built from an argv with ``shlex.join``; nothing a user typed reaches a shell
unquoted. Output formats use ``|`` separators with the free-text field (the job name) last.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from ...exceptions import SlurmCommandNotFoundError, SlurmError, SlurmRejectedError
from ...node.slurm.step import expand_hostlist
from ...remote.base import CommandResult, Runner

__all__ = [
    "NodeInfo",
    "QueuedJob",
    "SlurmCommands",
    "expand_hostlist",
    "parse_sacct",
    "parse_sinfo",
    "parse_squeue",
    "sbatch_error",
]

SQUEUE_FORMAT = "%i|%T|%r|%N|%l|%j"
SINFO_FORMAT = "%N|%T|%c|%G|%P|%E"
SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Timelimit,JobName"


@dataclass(frozen=True)
class QueuedJob:
    """One job as squeue or sacct shows it."""

    job_id: str
    state: str  # PENDING, RUNNING, CANCELLED by 0, ...
    reason: str
    nodes: tuple[str, ...]
    time_limit: str
    name: str
    exit_code: str | None = None  # sacct only: code:signal


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # sinfo %T: idle, mixed, down*, ...
    cpus: int
    gres: str
    partition: str
    reason: str


def parse_squeue(text: str) -> list[QueuedJob]:
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, state, reason, nodelist, limit, name = line.split("|", 5)
        nodes = tuple(expand_hostlist(nodelist)) if nodelist not in ("", "(null)") else ()
        jobs.append(QueuedJob(job_id.strip(), state, reason, nodes, limit, name))
    return jobs


def parse_sacct(text: str) -> list[QueuedJob]:
    """``sacct -P -n -X -o JobID,State,ExitCode,NodeList,Timelimit,JobName`` (job name last)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, state, exit_code, nodelist, limit, name = line.split("|", 5)
        nodes = tuple(expand_hostlist(nodelist)) if nodelist not in ("", "None assigned") else ()
        jobs.append(QueuedJob(job_id, state, "", nodes, limit, name, exit_code=exit_code))
    return jobs


def parse_sinfo(text: str) -> list[NodeInfo]:
    """``sinfo -h -N -o '%N|%T|%c|%G|%P|%E'``; a node in several partitions shows once per partition."""
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, state, cpus, gres, partition, reason = line.split("|", 5)
        nodes.append(NodeInfo(name, state, int(cpus or 0), gres, partition.rstrip("*"), reason))
    return nodes


_PARTITION = re.compile(r"invalid partition|partition .* (not found|does not exist)", re.I)
_ACCOUNT = re.compile(r"invalid account|account .* (not found|does not exist)", re.I)


def sbatch_error(stderr: str, exit_code: int) -> SlurmRejectedError:
    """sbatch's refusal as a typed error carrying its message (``code`` partition, account or rejected)."""
    lines = [ln.removeprefix("sbatch: error: ").strip() for ln in stderr.strip().splitlines() if ln.strip()]
    message = "; ".join(lines) or f"exit code {exit_code}"
    code = "partition" if _PARTITION.search(stderr) else "account" if _ACCOUNT.search(stderr) else "rejected"
    return SlurmRejectedError("sbatch", f"request refused: {message}", code=code, stderr=stderr)


class SlurmCommands:
    """Slurm's client commands on one machine (the login node, or this one)."""

    def __init__(
        self, runner: Runner, *, env: Mapping[str, str] | None = None, timeout: float = 60.0
    ) -> None:
        self.runner = runner
        self.env = dict(env or {})
        self.timeout = timeout

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
    ) -> CommandResult:
        command = shlex.join(argv)
        if self.env:
            command = (
                "env "
                + " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(self.env.items()))
                + " "
                + command
            )
        result = self.runner.run(
            command, stdin=stdin, timeout=timeout if timeout is not None else self.timeout
        )
        if result.exit_code == 127 and ("not found" in result.stderr or "No such file" in result.stderr):
            raise SlurmCommandNotFoundError(argv[0], self.runner.node)
        if check and not result.ok:
            raise SlurmError(argv[0], result.describe(), code="failed", stderr=result.stderr)
        return result

    # -- jobs --------------------------------------------------------------------------------------------
    def sbatch(self, script: str, *, timeout: float | None = None) -> str:
        """Submit ``script`` (read by sbatch from stdin); returns the job id."""
        result = self.run(["sbatch", "--parsable"], stdin=script, timeout=timeout, check=False)
        if not result.ok:
            raise sbatch_error(result.stderr, result.exit_code)
        return result.stdout.strip().split(";")[0]

    def squeue(
        self, *, names: Iterable[str] = (), job_ids: Iterable[str] = (), all_states: bool = True
    ) -> list[QueuedJob]:
        argv = ["squeue", "-h", "-o", SQUEUE_FORMAT]
        if all_states:
            argv += ["-t", "all"]
        names, job_ids = list(names), list(job_ids)
        if names:
            argv += ["-n", ",".join(names)]
        if job_ids:
            argv += ["-j", ",".join(job_ids)]
        result = self.run(argv, check=False)
        if not result.ok:
            if job_ids and "Invalid job id" in result.stderr:
                return []  # slurmctld has forgotten them (MinJobAge)
            raise SlurmError("squeue", result.describe(), code="failed", stderr=result.stderr)
        return parse_squeue(result.stdout)

    def start_time(self, job_id: str) -> str | None:
        """When Slurm expects pending job ``job_id`` to start (``squeue --start``'s ``%S``: the backfill
        scheduler's estimate from the running jobs' time limits), as an ISO time in UTC; None where Slurm
        gives none (``N/A``) or the command fails. Slurm prints the controller's local time."""
        result = self.run(["squeue", "-h", "--start", "-o", "%S", "-j", job_id], check=False)
        text = result.stdout.strip().splitlines()[0].strip() if result.ok and result.stdout.strip() else ""
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            return None  # N/A, Unknown
        return when.astimezone(timezone.utc).isoformat(timespec="seconds")

    def sacct(self, job_ids: Iterable[str]) -> list[QueuedJob] | None:
        """Ended jobs from Slurm's accounting; None when the cluster keeps none (no slurmdbd)."""
        ids = list(job_ids)
        if not ids:
            return []
        argv = ["sacct", "-P", "-n", "-X", "-o", SACCT_FIELDS, "-j", ",".join(ids)]
        result = self.run(argv, check=False)
        if not result.ok:
            if "accounting storage is disabled" in result.stderr.lower():
                return None
            raise SlurmError("sacct", result.describe(), code="failed", stderr=result.stderr)
        return parse_sacct(result.stdout)

    def scancel(self, job_ids: Iterable[str], *, timeout: float | None = None) -> None:
        ids = list(job_ids)
        if ids:
            self.run(["scancel", *ids], timeout=timeout)

    def release(self, job_id: str) -> None:
        self.run(["scontrol", "release", job_id])

    # -- nodes -------------------------------------------------------------------------------------------
    def sinfo(self, partition: str | None = None) -> list[NodeInfo]:
        argv = ["sinfo", "-h", "-N", "-o", SINFO_FORMAT]
        if partition:
            argv += ["-p", partition]
        return parse_sinfo(self.run(argv).stdout)

    def partitions(self) -> list[str]:
        out = self.run(["sinfo", "-h", "-o", "%P"]).stdout
        return [p.strip().rstrip("*") for p in out.splitlines() if p.strip()]
