"""``batchai job ...`` and ``batchai job file ...``: training jobs and their files."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from .._models import JobState
from ..batchai_json import parse_job_json
from ..share import join
from ._context import Context, Result, UsageError
from ._format import file_table, file_view, job_table, job_view

if TYPE_CHECKING:
    from ..job import Job


def _storage_account_for(ctx: Context, args: argparse.Namespace, group: str) -> str | None:
    """--storage-account-name, else $AZURE_BATCHAI_STORAGE_ACCOUNT, else the group's only storage account."""
    if args.storage_account_name:
        return str(args.storage_account_name)
    env = os.environ.get("AZURE_BATCHAI_STORAGE_ACCOUNT")
    if env:
        return env
    accounts = list(ctx.registry.get_group(group).get("storageAccounts", {}))
    return accounts[0] if len(accounts) == 1 else None


def job_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _, exp = ctx.experiment()
    convenience = {
        "--python-script": args.python_script,
        "--script-args": args.script_args,
        "--command-line": args.command_line,
        "--job-preparation": args.job_preparation,
        "--process-count": args.process_count,
    }
    given = [flag for flag, value in convenience.items() if value is not None]
    if args.config_file:
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be combined with --config-file (put them in the file)"
            )
        spec = parse_job_json(
            Path(args.config_file).expanduser(),
            name=args.name,
            experiment=exp.name,
            cluster=args.cluster,
            storage_account=_storage_account_for(ctx, args, group),
            storage_key=args.storage_account_key or os.environ.get("AZURE_BATCHAI_STORAGE_KEY"),
        )
        if args.nodes is not None:
            spec = spec.replace(node_count=args.nodes)
        job = exp.job_from_spec(spec)
    else:
        if args.python_script is None and args.command_line is None:
            raise UsageError(
                "give --config-file, or --python-script (Horovod) or --command-line (custom MPI)"
            )
        if args.python_script is not None and args.command_line is not None:
            raise UsageError("give either --python-script or --command-line, not both")
        job = exp.create_job(
            args.name,
            cluster=args.cluster,
            node_count=args.nodes or 1,
            python_script=args.python_script,
            args=shlex.split(args.script_args or ""),
            command_line=args.command_line,
            process_count=args.process_count,
            job_preparation=args.job_preparation,
        )
    job.submit()
    return Result(job_view(job, group), job_table)


def _job(ctx: Context, name: str) -> tuple[str, Job]:
    group, _, exp = ctx.experiment()
    return group, exp.get_job(name)


def job_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    return Result(job_view(job, group), job_table)


def job_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _, exp = ctx.experiment()
    return Result([job_view(j, group) for j in exp.list_jobs()], job_table)


def job_wait(ctx: Context, args: argparse.Namespace) -> Result | None:
    """Like az: blocks until the job ends; the exit status is the job's exit code."""
    group, job = _job(ctx, args.name)
    state = job.wait(timeout=args.timeout, poll_interval=args.interval)
    code = 0 if state is JobState.SUCCEEDED else (job.exit_code or 1)
    return Result(job_view(job, group), job_table, exit_code=code)


def job_terminate(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    ctx.confirm(f"terminate job {args.name!r}")
    job.terminate(wait=not args.no_wait)
    return Result(job_view(job, group), job_table)


def job_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.name)
    ctx.confirm(f"delete job {args.name!r} with its logs and outputs")
    job.delete(force=args.force)
    return None


def job_file_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    files = job.files(args.path or "", directory=args.output_directory_id)
    return Result([file_view(f) for f in files], file_table)


def job_file_stream(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    for line in job.stream(name, follow=True, directory=args.output_directory_id):
        print(line, flush=True)
    return None


def job_file_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    local = job.download(
        name, Path(args.dest).expanduser() if args.dest else Path.cwd(), directory=args.output_directory_id
    )
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})
