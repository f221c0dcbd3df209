"""The options that say what a job runs and how: ONE definition that ``batchai job create`` and ``batchai
sweep create`` (each trial is a job) both take, so the two cannot drift. A new job option goes here, with
its value in ``job_options``/``run_options``; only what is a command's own (``job create
--config-file``/``--stream``, a sweep's ``--param``) stays with the command."""

from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

from .._models import Toolkit
from ._context import NO_GROUP, Context, UsageError
from ._mount_flags import add_mount_args, mounts_from_args, storage_key
from ._params import positive, seconds


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
    p.add_argument("--max-retries", type=int, help="requeue after a lost node or a listed exit code")
    p.add_argument(
        "--retry-on-exit-code",
        type=int,
        action="append",
        default=None,
        help="an exit code that requeues (repeat)",
    )
    p.add_argument("--hang-timeout", type=seconds, help="end the job when no rank wrote output for this long")


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
    """``create_job``'s keywords the flags set that a job.json has no field for: what survives a fault
    (retries, hang timeout) and whether source_dir's requirements are installed."""
    options: dict[str, Any] = {}
    if args.max_retries is not None:
        options["max_retries"] = args.max_retries
    if args.retry_on_exit_code:
        options["retry_on_exit_codes"] = tuple(args.retry_on_exit_code)
    if args.hang_timeout is not None:
        options["hang_timeout"] = args.hang_timeout
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
