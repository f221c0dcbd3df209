"""``batchai job ...`` and ``batchai job file ...``: training jobs and their files."""

from __future__ import annotations

import argparse
import posixpath
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._faults import KINDS as FAULT_KINDS
from .._hints import cli_reason
from .._models import JobState
from ..batchai_json import json_field_error, parse_job_json
from ..exceptions import NotFoundError, ValidationError
from ..experiment import unique_job_name
from ..job import StatusLine
from ..share import join
from ._context import Context, Handler, Result, UsageError
from ._format import file_table, file_view, job_table, job_view, metrics_table
from ._job_options import (
    add_job_options,
    job_mounts,
    job_options,
    run_options,
    save_plot,
    storage_account_for,
)
from ._params import Commands, experiment_arg, positive, resource_group_arg, seconds, workspace_arg, yes_arg

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..job import Job
    from ..mounts import AzureFileShare
    from ..workspace import Workspace


_WHERE = "-g batchai.horovod -w batchaidev -e cifar"  # in the examples


def register(commands: Commands) -> None:
    j = commands.group(
        "job",
        "training jobs",
        examples=(
            "batchai job create -g batchai.horovod -w batchaidev -e cifar -n cifar_dist -c nc6cluster "
            "--config-file job.json",
            "batchai job create -g batchai.horovod -w batchaidev -e cifar -c nc6cluster "
            "--python-script train.py --nodes 2 --stream",
            "batchai job show -g batchai.horovod -w batchaidev -e cifar -n cifar_dist --output table",
            "batchai job list -g batchai.horovod -w batchaidev -e cifar --output table",
            "batchai job logs -g batchai.horovod -w batchaidev -e cifar -n cifar_dist --follow",
            "batchai job metrics -g batchai.horovod -w batchaidev -e cifar -n cifar_dist -o table "
            "--plot curves.png",
            "batchai job wait -g batchai.horovod -w batchaidev -e cifar -n cifar_dist --timeout 3600",
            "batchai job terminate -g batchai.horovod -w batchaidev -e cifar -n cifar_dist --yes",
            "batchai job delete -g batchai.horovod -w batchaidev -e cifar -n cifar_dist --yes",
            "batchai job inject-fault -g batchai.horovod -w batchaidev -e cifar -n cifar_dist "
            "--kind lose_node --at-step 120",
            "batchai job drill -g batchai.horovod -w batchaidev -e cifar -c nc6cluster "
            "--config-file job.json --faults 3 --kinds lose_node,evict,kill_rank --retry-on-exit-code 137",
        ),
    )
    _register_create(j)
    _register_drills(j)
    _job_command(j, "show", job_show, "show a job")
    p = j.command("list", job_list, "list an experiment's jobs")
    resource_group_arg(p)
    workspace_arg(p)
    experiment_arg(p)
    p = _job_command(j, "wait", job_wait, "wait for a job to end; the exit status is the job's exit code")
    p.add_argument("--interval", type=seconds, default=2.0, help="seconds between polls (default 2)")
    p.add_argument("--timeout", type=seconds, help="give up after this many seconds")
    p = _job_command(j, "terminate", job_terminate, "terminate a job")
    p.add_argument("--no-wait", action="store_true", help="return without waiting for the ranks to stop")
    yes_arg(p)
    p = _job_command(j, "delete", job_delete, "delete a job with its logs and outputs")
    p.add_argument("--force", action="store_true", help="terminate it first if it has not ended")
    yes_arg(p)
    p = _job_command(j, "metrics", job_metrics, "a job's metrics (log_metric's records), all attempts")
    p.add_argument("--plot", metavar="FILE.png", help="also write the job's curves to FILE.png (.svg, .pdf)")
    p = _job_command(j, "logs", job_logs, "print a job's output (stdout.txt); with --follow, until it ends")
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing as the job writes, until it ends"
    )
    p.add_argument(
        "--file-name", default="stdout.txt", help="which log (default stdout.txt; e.g. stderr.txt)"
    )
    _register_file(
        j.group(
            "file",
            "a job's files: logs (stdouterr) and output directories",
            examples=(
                "batchai job file list " + _WHERE + " -j cifar_dist --output table",
                "batchai job file stream -g batchai.horovod -w batchaidev -e cifar -j cifar_dist "
                "--file-name stdout.txt",
                "batchai job file download -g batchai.horovod -w batchaidev -e cifar -j cifar_dist "
                "--file-name stderr.txt --dest logs/",
            ),
        )
    )


def _job_command(j: Commands, name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
    """A command on one job: -g, -w, -e and --name."""
    p = j.command(name, handler, help_text)
    resource_group_arg(p)
    workspace_arg(p)
    experiment_arg(p)
    p.add_argument(
        "--name",
        "-n",
        required=(handler not in (job_create, job_drill)),
        help="the job's name"
        + (" (default: a unique job-<time>-<hex> name)" if handler in (job_create, job_drill) else ""),
    )
    return p


def _register_create(
    j: Commands,
    name: str = "create",
    handler: Handler | None = None,
    text: str = "create and submit a job from a Batch AI job.json (or flags)",
) -> argparse.ArgumentParser:
    p = _job_command(j, name, handler or job_create, text)
    p.add_argument("--config-file", "-f", help="Batch AI 2018-05-01 job.json")
    add_job_options(p)  # every option a sweep's trials take too: one definition (_job_options.py)
    p.add_argument(
        "--stream", action="store_true", help="print the job's output until it ends (as job logs -f)"
    )
    return p


def _register_drills(j: Commands) -> None:
    p = _job_command(j, "inject-fault", job_inject_fault, "put a fault into a running job (a drill)")
    p.add_argument("--kind", required=True, choices=FAULT_KINDS, help="what to do (docs/survive.md)")
    p.add_argument("--node", help="the node it hits (default: the attempt's last node)")
    p.add_argument("--rank", type=int, help="kill_rank, hang_rank: the global rank it hits")
    p.add_argument("--at-step", type=int, help="wait until the job logged this step (log_metric)")
    p.add_argument("--grace", type=seconds, default=30.0, help="evict: seconds to checkpoint (default 30)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="give up waiting after this many seconds")
    p = _register_create(j, "drill", job_drill, "run a job through N random faults; print what each cost")
    p.add_argument("--faults", type=positive, default=3, help="how many faults (default 3)")
    p.add_argument(
        "--kinds",
        default="lose_node,evict",
        help=f"comma-separated kinds to draw from (default lose_node,evict; of {', '.join(FAULT_KINDS)})",
    )
    p.add_argument("--every-steps", type=positive, default=10, help="about this many steps between faults")
    p.add_argument("--seed", type=int, help="the random draws' seed (default: random)")


def _register_file(jf: Commands) -> None:
    for name, handler, text in (
        ("list", job_file_list, "list a job's files"),
        ("stream", job_file_stream, "print a job file as it grows, until the job ends"),
        ("download", job_file_download, "download a job file"),
    ):
        p = jf.command(name, handler, text)
        resource_group_arg(p)
        workspace_arg(p)
        experiment_arg(p)
        p.add_argument("--job", "-j", required=True, help="the job")
        p.add_argument(
            "--output-directory-id",
            "-d",
            default="stdouterr",
            help="'stdouterr' (default) or an output directory id",
        )
        p.add_argument("--path", "-p", default="", help="a folder inside that directory")
        if name != "list":
            p.add_argument("--file-name", "-f", required=True, help="the file, e.g. stdout.txt")
        if name == "download":
            p.add_argument("--dest", help="file or folder to write (default: the working directory)")


def job_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, ws, exp = ctx.experiment(create_default=True)
    name = args.name or unique_job_name()
    convenience = {
        "--python-script": args.python_script,
        "--command-line": args.command_line,
        "--job-preparation": args.job_preparation,
        "--process-count": args.process_count,
        "--toolkit": args.toolkit,
    }
    given = [flag for flag, value in convenience.items() if value is not None]
    if args.config_file:
        mounts, key = job_mounts(ctx, args, group)
        if given:
            raise UsageError(
                f"{', '.join(given)} cannot be combined with --config-file (put them in the file)"
            )
        spec = parse_job_json(
            Path(args.config_file).expanduser(),
            name=name,
            experiment=exp.name,
            cluster=args.cluster,
            storage_account=storage_account_for(ctx, args, group),
            storage_key=key,
            # one storage model: a share is the workspace's own only when it names it (local backend:
            # its storage folder is the workspace share); elsewhere the file's first share, as before
            workspace_share=_names_workspace_share(ws),
        )
        if mounts:  # added to the file's mountVolumes, as az added them
            spec = spec.replace(mounts=(*spec.mounts, *mounts))
        if args.nodes is not None:
            spec = spec.replace(node_count=args.nodes)
        if args.script_args:
            spec = spec.replace(args=(*spec.args, *shlex.split(args.script_args)))
        if args.source_dir is not None:
            if spec.python_script is None:
                raise UsageError("--source-dir needs a script: the file's toolkit runs a command line")
            # the file's script folder (a share path) gives way to the local project: its script, by name
            script = posixpath.basename(spec.python_script)
            spec = spec.replace(source_dir=args.source_dir, python_script=script)
        spec = spec.replace(**run_options(args))
        try:
            job = exp.job_from_spec(spec)
        except ValidationError as exc:  # refusals name the JSON path the file's author wrote
            raise json_field_error(exc) from exc
    else:
        job = exp.create_job(name, **job_options(ctx, args, group))
    job.submit()
    where = ctx.where(group, job.workspace.name)
    if args.stream:
        return _follow(job, where, "stdout.txt")
    return Result(job_view(job, group), job_table)


def _names_workspace_share(ws: Workspace) -> Callable[[AzureFileShare], bool] | None:
    if ws.backend.kind != "local":
        return None
    return lambda mount: ws.backend.names_workspace_share(mount) is True


def _waiting_line(job: Job) -> str:
    """``queued: waiting for 2 node(s) of cluster c (1 busy, 0 idle)``."""
    cluster = job.workspace.get_cluster(job.spec.cluster)
    counts = cluster.node_counts
    return (
        f"{job.name} is queued: waiting for {job.spec.node_count} node(s) of cluster {cluster.name!r} "
        f"({counts.running + counts.preparing} busy, {counts.idle} idle, {counts.unusable} unusable)"
    )


def _command(verb: str, job: Job, where: str) -> str:
    """``batchai job VERB`` naming this job again (``where``: the workspace's flags, see Context.where)."""
    parts = ["batchai job", verb, where, f"-e {shlex.quote(job.experiment.name)} -n {shlex.quote(job.name)}"]
    return " ".join(p for p in parts if p)


def _end_line(job: Job, where: str, *, shown_stderr: bool = False) -> tuple[str | None, int]:
    """How the job ended, for stderr, and the exit status that says it (0: succeeded); then the command
    that shows the full stderr.txt, unless that is what was just printed (``shown_stderr``)."""
    status = job.status
    if status.state is JobState.SUCCEEDED:
        return None, 0
    reason = cli_reason(status.failure_reason) or "no reason recorded"
    line = f"job {job.name} {status.state.value}: {reason}"
    if not shown_stderr:
        line += f"\nthe full output: {_command('logs', job, where)} --file-name stderr.txt"
    return line, status.exit_code or 1


def _follow(job: Job, where: str, name: str, *, directory: str | None = None, follow: bool = True) -> Result:
    """Print a job file as it grows; say what a queued job waits for; end with how the job ended."""
    status = job.status if follow else None
    if status is not None and status.state is JobState.QUEUED and status.pending is None:
        print(_waiting_line(job), file=sys.stderr, flush=True)  # a backend that does not say why
    known = [f.name for f in job.files()] if job.state.ended else None
    if known is not None and directory in (None, "stdouterr") and name not in known and "/" not in name:
        roots = job.file_roots()
        if not any(job.workspace.share.exists(join(r, name)) for r in roots):
            raise NotFoundError(
                "file", name, f"job {job.name!r}; its files: {', '.join(sorted(known)) or 'none'}"
            )
    try:
        for line in job.stream(name, follow=follow, directory=directory):
            # why the job waits goes to stderr with the other notes: stdout is the file's
            print(line, flush=True, file=sys.stderr if isinstance(line, StatusLine) else sys.stdout)
    except KeyboardInterrupt:
        stop = _command("terminate", job, where)
        print(f"detached; the job is still running (`{stop}` stops it)", file=sys.stderr, flush=True)
        return Result(None, exit_code=130)
    if not follow and not job.state.ended:
        return Result(None)
    end, code = _end_line(job, where, shown_stderr=name == "stderr.txt" and directory in (None, "stdouterr"))
    if end:
        print(end, file=sys.stderr, flush=True)
    return Result(None, exit_code=code)


def _job(ctx: Context, name: str) -> tuple[str, Job]:
    group, _, exp = ctx.experiment()
    return group, exp.get_job(name)


def _where(ctx: Context, group: str, job: Job) -> str:
    return ctx.where(group, job.workspace.name)


def job_inject_fault(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.name)
    fault = job.inject_fault(
        args.kind, node=args.node, rank=args.rank, at_step=args.at_step, grace_seconds=args.grace,
        timeout=args.timeout,
    )  # fmt: skip
    return Result(fault)


def job_drill(ctx: Context, args: argparse.Namespace) -> Result | None:
    """``job create``, then ``--faults`` faults drawn from ``--kinds``, each about ``--every-steps`` steps
    after the job resumed from the last; prints each recovery and the job's goodput."""
    from .._drill import run_drill

    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for kind in kinds:
        if kind not in FAULT_KINDS:
            raise UsageError(f"--kinds: {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    args.name = args.name or unique_job_name()
    args.stream = False
    job_create(ctx, args)
    group, job = _job(ctx, args.name)
    report = run_drill(job, kinds, args.faults, every_steps=args.every_steps, seed=args.seed, say=print)
    end, code = _end_line(job, _where(ctx, group, job))
    if end:
        print(end, file=sys.stderr, flush=True)
    return Result(report, exit_code=code)


def job_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    return Result(job_view(job, group), job_table)


def job_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, _, exp = ctx.experiment()
    return Result([job_view(j, group) for j in exp.list_jobs()], job_table)


def job_wait(ctx: Context, args: argparse.Namespace) -> Result | None:
    """Like az: blocks until the job ends; the exit status is the job's exit code."""
    group, job = _job(ctx, args.name)
    job.wait(timeout=args.timeout, poll_interval=args.interval)
    end, code = _end_line(job, _where(ctx, group, job))
    if end:
        print(end, file=sys.stderr, flush=True)
    return Result(job_view(job, group), job_table, exit_code=code)


def job_logs(ctx: Context, args: argparse.Namespace) -> Result | None:
    group, job = _job(ctx, args.name)
    return _follow(job, _where(ctx, group, job), args.file_name, follow=args.follow)


def job_metrics(ctx: Context, args: argparse.Namespace) -> Result | None:
    """The records of ``job.metrics()`` (one per line of metrics.jsonl; empty before the first)."""
    from .._metrics import read_records

    _, job = _job(ctx, args.name)
    rows = read_records(job)
    if args.plot:
        save_plot(ctx, job.plot_metrics(), args.plot)
    return Result(rows, metrics_table)


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
    group, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    directory = None if args.output_directory_id == "stdouterr" else args.output_directory_id
    return _follow(job, _where(ctx, group, job), name, directory=directory)


def job_file_download(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, job = _job(ctx, args.job)
    name = join(args.path or "", args.file_name)
    local = job.download(
        name, Path(args.dest).expanduser() if args.dest else Path.cwd(), directory=args.output_directory_id
    )
    return Result({"path": str(local), "size": local.stat().st_size if local.is_file() else None})
