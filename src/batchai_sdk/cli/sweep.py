"""``batchai sweep ...``: hyperparameter sweeps (``Experiment.sweep``): create and run one, show its table.

``batchai sweep --subscription ...`` (no subcommand) was the Azure resource lister: it still runs
``batchai resource list`` with a deprecation note (``DEPRECATED_FORM``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..tuning import MIN_TRIALS, TRIAL_HANG_TIMEOUT
from ._context import Context, Result, UsageError
from ._format import Row, _items
from ._job_options import add_job_options, job_options, off_or_duration, save_plot
from ._params import Commands, experiment_arg, positive, resource_group_arg, workspace_arg

SUBCOMMANDS = ("create", "show", "-h", "--help")


def deprecated_form(argv: Sequence[str]) -> list[str] | None:
    """``batchai sweep [--subscription S] [-w W]`` → ``batchai resource list ...`` (None: not that form)."""
    words = list(argv)
    if not words or words[0] != "sweep" or any(w in SUBCOMMANDS for w in words[1:2]):
        return None
    return ["resource", "list", *words[1:]]


def register(commands: Commands) -> None:
    s = commands.group(
        "sweep",
        "hyperparameter sweeps: one job per parameter point, a table of parameters x final metrics",
        examples=(
            "batchai sweep create -e cifar -n lr -c nc6cluster --python-script train.py "
            "--param lr=0.1,0.01,0.001 --param batch=32,64 --max-concurrent 2 -o table",
            "batchai sweep create -e cifar -n rnd -c nc6cluster --python-script train.py "
            "--param lr=loguniform:1e-4:1e-1 --random 8 --seed 1 --early-stop val_loss:min",
            "batchai sweep show -e cifar -n lr -o table",
        ),
    )
    p = s.command(
        "create",
        sweep_create,
        "create a sweep and run it to the end (or --no-wait); exit status 1 when every trial failed",
    )
    resource_group_arg(p)
    workspace_arg(p)
    experiment_arg(p)
    p.add_argument("--name", "-n", required=True, help="the sweep (its jobs are NAME-000, NAME-001, ...)")
    add_job_options(p)  # every trial is a job: the options of `job create`, from the same definition
    p.add_argument(
        "--param",
        action="append",
        required=True,
        metavar="NAME=SPEC",
        help="a parameter: NAME=V1,V2,... (values) or NAME=uniform|loguniform|randint:LOW:HIGH; repeat",
    )
    p.add_argument("--random", type=positive, metavar="N", help="N random trials (default: the whole grid)")
    p.add_argument("--seed", type=int, help="the random draw's seed")
    p.add_argument("--max-concurrent", type=positive, default=2, help="trials unfinished at once (default 2)")
    p.add_argument(
        "--early-stop",
        metavar="METRIC:min|max[:GRACE]",
        help="stop a trial whose METRIC is worse than the other trials' median at the same step (its "
        "`step`, else its record count), from step GRACE on (default 1)",
    )
    p.add_argument(
        "--early-stop-min-trials",
        type=positive,
        metavar="N",
        help=f"other trials that must have reached a step before the rule applies (default {MIN_TRIALS})",
    )
    p.add_argument(
        "--trial-hang-timeout",
        type=off_or_duration,  # as job create's --hang-timeout
        metavar="DURATION",
        help=f"end a trial silent this long, counted failed (default {TRIAL_HANG_TIMEOUT:g}; 0: off)",
    )
    p.add_argument("--no-wait", action="store_true", help="create the sweep only; `sweep show --run` runs it")
    p = s.command("show", sweep_show, "show a sweep's trials: parameters, final metrics, why any stopped")
    resource_group_arg(p)
    workspace_arg(p)
    experiment_arg(p)
    p.add_argument("--name", "-n", required=True, help="the sweep")
    p.add_argument("--run", action="store_true", help="go on running it (trials not submitted yet)")
    p.add_argument("--plot", metavar="FILE.png", help="also write the trials' curves, overlaid, to FILE.png")


def _early_stop(text: str | None, min_trials: int | None) -> Any:
    from ..tuning import EarlyStop

    if text is None:
        if min_trials is not None:
            raise UsageError("--early-stop-min-trials needs --early-stop METRIC:min|max")
        return None
    metric, _, rest = text.partition(":")
    mode, _, grace = rest.partition(":")
    if not metric or mode not in ("min", "max") or (grace and not grace.isdigit()):
        raise UsageError(
            f"--early-stop {text!r}: expected METRIC:min or METRIC:max, optionally :GRACE steps, "
            "e.g. val_loss:min:2"
        )
    return EarlyStop(metric, mode, grace=int(grace) if grace else 1, min_trials=min_trials or MIN_TRIALS)


def sweep_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    from ..tuning import parse_param

    group, _, exp = ctx.experiment()
    space = dict(parse_param(text) for text in args.param)
    distributions = [n for n, v in space.items() if isinstance(v, tuple)]
    if distributions and args.random is None:
        raise UsageError(f"--param {distributions[0]} is a distribution: give --random N trials")
    sweep = exp.sweep(
        args.name,
        grid=None if args.random else space,
        random=space if args.random else None,
        trials=args.random,
        seed=args.seed,
        max_concurrent=args.max_concurrent,
        early_stop=_early_stop(args.early_stop, args.early_stop_min_trials),
        trial_hang_timeout=args.trial_hang_timeout,
        **job_options(ctx, args, group),
    )
    cost = sweep.estimate_cost()
    if cost is not None:
        ctx.note(f"sweep {sweep.name}: {len(sweep.trials)} trial(s), about {cost} at an hour each")
    if args.no_wait:
        return Result(sweep.results(frame=False), sweep_table)
    return _run(ctx, sweep)


def _run(ctx: Context, sweep: Any) -> Result:
    sweep.run(on_event=ctx.note)
    rows = sweep.results(frame=False)
    if rows and all(r["state"] == "failed" for r in rows):
        ctx.note(f"sweep {sweep.name}: every trial failed ({rows[0].get('note') or 'no reason recorded'})")
        return Result(rows, sweep_table, exit_code=1)
    return Result(rows, sweep_table)


def sweep_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    _, _, exp = ctx.experiment()
    sweep = exp.get_sweep(args.name)
    result = _run(ctx, sweep) if args.run else Result(sweep.results(frame=False), sweep_table)
    if args.plot:
        save_plot(ctx, sweep.plot_metrics(), args.plot)
    return result


def sweep_table(result: Any) -> list[Row]:
    """One row per trial: job, state, its parameters, its final metrics (the columns every trial has)."""
    from .._display import format_cell, result_columns

    rows = _items(result)
    columns = result_columns(rows)
    return [{c: format_cell(r.get(c)) for c in columns} for r in rows]
