"""The sbatch script of a job — a pure builder, tested on its exact text.

Options go into ``#SBATCH`` lines (sbatch reads single-quoted values there as the shell would); the body
runs the job's launcher (``node/slurm/step.py``) inside the allocation with the nodes' Python.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...exceptions import ValidationError

__all__ = ["SbatchRequest", "parse_job_name", "sbatch_script", "slurm_job_name", "time_limit"]

PREFIX = "batchai"
_SAFE_VALUE = re.compile(r"^[^\n\r\x00]*$")


def slurm_job_name(workspace: str, experiment: str, job: str) -> str:
    """``batchai.<workspace>.<experiment>.<job>``: our names never hold a dot, so this parses back."""
    return ".".join((PREFIX, workspace, experiment, job))


def parse_job_name(name: str) -> tuple[str, str, str] | None:
    """(workspace, experiment, job) of a name made by ``slurm_job_name``; None for any other job."""
    parts = name.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


def time_limit(seconds: float) -> str:
    """Slurm's ``--time`` in whole minutes (its granularity), rounded up: ``D-HH:MM:00``."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00"


@dataclass(frozen=True)
class SbatchRequest:
    """What sbatch is asked for. Paths are the nodes' paths."""

    job_name: str
    nodes: int
    ntasks: int
    stdouterr_dir: str
    workdir: str
    launcher: Sequence[str]  # argv run in the allocation: python -S node code slurm-job batch launch.json
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    gpus_per_node: int = 0
    max_wall_clock_seconds: float | None = None
    hold: bool = False  # submitted held: the scheduler releases it once the name is known to be unique
    comment: str | None = None
    extra: Sequence[str] = field(default_factory=tuple)  # more sbatch options, e.g. ("--qos=high",)

    def __post_init__(self) -> None:
        for name in ("nodes", "ntasks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(name, value, "an integer >= 1")
        if self.ntasks < self.nodes:
            raise ValidationError(
                "process_count", self.ntasks, f"at least one process per node ({self.nodes})"
            )
        gpus = self.gpus_per_node
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            raise ValidationError("gpus_per_node", gpus, "an integer >= 0")
        for name in ("job_name", "stdouterr_dir", "workdir", "partition", "account", "constraint", "comment"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, str) or not value or not _SAFE_VALUE.match(value)
            ):
                raise ValidationError(name, value, "a non-empty string on one line")
        for i, option in enumerate(self.extra):
            if not option.startswith("--") or not _SAFE_VALUE.match(option):
                raise ValidationError(
                    f"sbatch_options[{i}]", option, "a long sbatch option such as '--qos=high'"
                )


def _literal(path: str) -> str:
    """A path sbatch takes as written: ``%`` starts its filename patterns (``%j``), ``%%`` is one ``%``."""
    return path.replace("%", "%%")


def _option(name: str, value: object) -> str:
    return f"#SBATCH --{name}={shlex.quote(str(value))}"


def sbatch_script(req: SbatchRequest) -> str:
    """The whole script: ``#SBATCH`` options, then ``exec`` of the launcher inside the allocation."""
    base, extra = divmod(req.ntasks, req.nodes)
    lines = [
        "#!/bin/sh",
        _option("job-name", req.job_name),
        _option("nodes", req.nodes),
        _option("ntasks", req.ntasks),
    ]
    if extra == 0:
        lines.append(_option("ntasks-per-node", base))
    if req.gpus_per_node:
        lines.append(_option("gres", f"gpu:{req.gpus_per_node}"))
    if req.partition:
        lines.append(_option("partition", req.partition))
    if req.account:
        lines.append(_option("account", req.account))
    if req.constraint:
        lines.append(_option("constraint", req.constraint))
    if req.max_wall_clock_seconds:
        lines.append(_option("time", time_limit(req.max_wall_clock_seconds)))
    if req.comment:
        lines.append(_option("comment", req.comment))
    lines += [
        _option("output", _literal(f"{req.stdouterr_dir}/stdout.txt")),
        _option("error", _literal(f"{req.stdouterr_dir}/stderr.txt")),
        _option("open-mode", "append"),
        _option("chdir", req.workdir),
    ]
    if req.hold:
        lines.append("#SBATCH --hold")
    lines += [f"#SBATCH {shlex.quote(option)}" for option in req.extra]
    lines += ["", "exec " + shlex.join(req.launcher), ""]
    return "\n".join(lines)
