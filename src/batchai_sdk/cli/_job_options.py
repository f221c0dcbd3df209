"""The options that say what a job runs and how: ONE definition that ``batchai job create`` and ``batchai
sweep create`` (each trial is a job) both take, so the two cannot drift. A new job option goes here, with
its value in ``job_options``/``run_options``; only what is a command's own (``job create
--config-file``/``--stream``, a sweep's ``--param``) stays with the command.

How the job runs — its wall clock limit, hang notice and watchdog, retries, queue priority and health gate —
is ``add_job_run_options``/``job_run_options``: each such flag overrides the same setting of
``--config-file`` (``constraints.maxWallClockTime``, ``schedulingPriority``, the ``batchaiSdk`` object)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
from typing import Any

from .._models import Toolkit
from ..batchai_json.values import parse_duration
from ..node.protocol.names import LEVELS, PRIORITIES
from ._context import NO_GROUP, Context, UsageError
from ._mount_flags import add_mount_args, mounts_from_args, storage_key
from ._params import non_negative, positive


def add_job_options(p: argparse.ArgumentParser) -> None:
    """``--cluster``, ``--nodes``, the storage account and mount flags, the script and how its ranks start,
    its source folder, and what survives a fault (retries, hang timeout)."""
    p.add_argument("--cluster", "-c", required=True, help="the cluster the job runs on")
    p.add_argument("--nodes", type=positive, help="number of nodes (default 1; overrides a file's nodeCount)")
    p.add_argument(
        "--storage-account-name",
        help="the account of --afs-name/--bfs-name; fills <AZURE_BATCHAI_STORAGE_ACCOUNT> (default: "
        "$AZURE_BATCHAI_STORAGE_ACCOUNT, else the resource group's only storage account)",
    )
    p.add_argument(
        "--storage-account-key",
        help="its key; fills <AZURE_BATCHAI_STORAGE_KEY>; never stored (prefer "
        "$AZURE_BATCHAI_STORAGE_KEY, the default: a flag's value is in your shell history)",
    )
    add_mount_args(p, root="AZ_BATCHAI_JOB_MOUNT_ROOT")
    p.add_argument(
        "--python-script",
        help="the script (a local file, a $AZ_BATCHAI_JOB_MOUNT_ROOT/... share path or a module name); "
        "with --source-dir, a file in that folder",
    )
    p.add_argument(
        "--toolkit",
        choices=[t.value for t in Toolkit],
        type=str.lower,
        help="how --python-script's ranks start (default horovod; pytorch: DDP's variables, "
        "tensorflow: TF_CONFIG; see docs/toolkits.md)",
    )
    p.add_argument(
        "--script-args",
        help="the script's arguments, one string; with --config-file, added after the file's commandLineArgs",
    )
    p.add_argument(
        "--source-dir",
        help="a local project folder, uploaded whole (its sibling modules import); --python-script, or "
        "with --config-file the file's script name, is a file in it",
    )
    p.add_argument(
        "--no-install-requirements",
        dest="install_requirements",
        action="store_false",
        help="--source-dir's requirements.txt (or pyproject.toml dependencies) is installed already: do not "
        "install it into the job's own venv on each node (the default)",
    )
    p.add_argument("--command-line", help="without --config-file: a custom MPI command line")
    p.add_argument("--process-count", type=positive, help="without --config-file: number of ranks")
    p.add_argument("--job-preparation", help="without --config-file: command run once per node first")
    add_job_run_options(p)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str, *, zero: bool = False) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h``, ``1d``, ``PT1H30M`` or ``1.00:00:00``."""
    value: float | None = None
    raw = text.strip().lower()
    try:
        value = float(raw[:-1]) * _UNITS[raw[-1]] if raw and raw[-1] in _UNITS else float(raw)
    except ValueError:
        try:
            value = parse_duration(text.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = ">= 0 (0: off)" if zero else "> 0"
        raise argparse.ArgumentTypeError(
            f"expected a duration {least} such as 90, 30m, 2h, PT1H30M or 1.00:00:00; got {text!r}"
        )
    return value


def off_or_duration(text: str) -> float:
    """A duration, or 0 for off."""
    return duration(text, zero=True)


def _exit_codes(text: str) -> list[int]:
    """``3`` or ``3,75``: exit codes 1..255."""
    codes: list[int] = []
    for part in text.split(","):
        try:
            code = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected exit codes such as 3 or 3,75; got {text!r}") from None
        if not 1 <= code <= 255:
            raise argparse.ArgumentTypeError(f"an exit code is 1..255, got {code}")
        codes.append(code)
    return codes


def add_job_run_options(parser: argparse.ArgumentParser) -> None:
    """The flags of the settings a job runs under (see the module's docstring)."""
    group = parser.add_argument_group("how the job runs (override --config-file)")
    group.add_argument(
        "--max-wall-clock-time",
        type=duration,
        metavar="DURATION",
        help="end the job once it has run this long (90, 30m, 2h, 1.00:00:00; job.json's "
        "constraints.maxWallClockTime); also what a queued job's estimated start is made of",
    )
    group.add_argument(
        "--hang-notice",
        type=off_or_duration,
        metavar="DURATION",
        help="say 'possibly hung' (with the ranks' stacks) after this long without progress; the job goes "
        "on (default 10m; 0: off)",
    )
    group.add_argument(
        "--hang-timeout",
        type=off_or_duration,
        metavar="DURATION",
        help="end the job after this long without progress, with the ranks' stacks (0: off)",
    )
    group.add_argument(
        "--max-retries", type=non_negative, help="requeue after a lost node or a listed exit code, this often"
    )
    group.add_argument(
        "--retry-on-exit-codes",
        "--retry-on-exit-code",
        dest="retry_on_exit_codes",
        type=_exit_codes,
        action="append",
        default=None,
        metavar="CODES",
        help="exit codes that requeue the job: 3 or 3,75 (repeatable)",
    )
    group.add_argument(
        "--priority",
        choices=list(PRIORITIES),
        type=str.lower,
        help="the cluster queue's order: higher first, then first come (job.json's schedulingPriority)",
    )
    group.add_argument(
        "--health-check",
        choices=[level for level in LEVELS if level != "off"],
        type=str.lower,
        help="its nodes pass this health gate right before it starts; a failing node is kept out",
    )


def job_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``JobSpec`` fields of the flags given (none given: ``{}``)."""
    options: dict[str, Any] = {}
    if getattr(args, "max_wall_clock_time", None) is not None:
        options["max_wall_clock_seconds"] = args.max_wall_clock_time
    if getattr(args, "hang_notice", None) is not None:
        options["hang_notice"] = args.hang_notice
    if getattr(args, "hang_timeout", None) is not None:
        options["hang_timeout"] = args.hang_timeout
    if getattr(args, "max_retries", None) is not None:
        options["max_retries"] = args.max_retries
    if getattr(args, "retry_on_exit_codes", None):
        options["retry_on_exit_codes"] = tuple(c for codes in args.retry_on_exit_codes for c in codes)
    if getattr(args, "priority", None) is not None:
        options["scheduling_priority"] = args.priority
    if getattr(args, "health_check", None) is not None:
        options["health_check"] = args.health_check
    return options


def storage_account_for(ctx: Context, args: argparse.Namespace, group: str) -> str | None:
    """--storage-account-name, else $AZURE_BATCHAI_STORAGE_ACCOUNT, else the group's only storage account."""
    if args.storage_account_name:
        return str(args.storage_account_name)
    env = os.environ.get("AZURE_BATCHAI_STORAGE_ACCOUNT")
    if env:
        return env
    if group == NO_GROUP:
        return None
    accounts = list(ctx.registry.get_group(group).get("storageAccounts", {}))
    return accounts[0] if len(accounts) == 1 else None


def job_mounts(ctx: Context, args: argparse.Namespace, group: str) -> tuple[list[Any], str | None]:
    """The mounts the flags ask for, and the storage key they carry (``storage_key``'s)."""
    key = storage_key(args, ctx.note)
    return mounts_from_args(args, account=storage_account_for(ctx, args, group), key=key), key


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """``create_job``'s keywords the flags set beyond what the job runs: how it runs (``job_run_options``)
    and whether source_dir's requirements are installed."""
    options = job_run_options(args)
    if not args.install_requirements:
        options["install_requirements"] = False
    return options


def job_options(ctx: Context, args: argparse.Namespace, group: str) -> dict[str, Any]:
    """``create_job``'s keywords from the flags (no --config-file): what the job runs and how."""
    if args.python_script is None and args.command_line is None:
        file = "--config-file, or " if hasattr(args, "config_file") else ""  # job create's own option
        raise UsageError(
            f"give {file}--python-script (with --toolkit; default horovod) or --command-line (custom MPI)"
        )
    if args.python_script is not None and args.command_line is not None:
        raise UsageError("give either --python-script or --command-line, not both")
    mounts, _ = job_mounts(ctx, args, group)
    options: dict[str, Any] = dict(
        cluster=args.cluster,
        node_count=args.nodes or 1,
        python_script=args.python_script,
        args=shlex.split(args.script_args or ""),
        command_line=args.command_line,
        toolkit=args.toolkit,
        process_count=args.process_count,
        job_preparation=args.job_preparation,
        source_dir=args.source_dir,
        **run_options(args),
    )
    if "max_wall_clock_seconds" in options:  # the JobSpec field is create_job's max_wall_clock_time
        options["max_wall_clock_time"] = options.pop("max_wall_clock_seconds")
    if mounts:
        options["mounts"] = mounts
    return options


def save_plot(ctx: Context, figure: Any, path: str) -> None:
    """Write a metrics Figure (``plot_metrics()``) to ``path`` (its suffix says the format: .png, .svg,
    .pdf) and say where."""
    target = os.path.abspath(os.path.expanduser(path))
    try:
        figure.savefig(target)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--plot {path!r}: cannot write it: {exc}") from None
    ctx.note(f"the plot: {target}")
