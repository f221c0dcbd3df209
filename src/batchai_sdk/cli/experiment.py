"""``batchai experiment ...``: named groups of jobs."""

from __future__ import annotations

import argparse

from ._context import Context, Result
from ._format import experiment_table, experiment_view


def experiment_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    exp = ws.create_experiment(args.name, exist_ok=True)
    return Result(experiment_view(exp, group), experiment_table)


def experiment_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(
        experiment_view(ctx.open_workspace(group).get_experiment(args.name), group), experiment_table
    )


def experiment_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    return Result(
        [experiment_view(e, group) for e in ctx.open_workspace(group).list_experiments()], experiment_table
    )


def experiment_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.group()
    ws = ctx.open_workspace(group)
    ws.get_experiment(args.name)
    ctx.confirm(f"delete experiment {args.name!r} and its jobs")
    ws.delete_experiment(args.name, force=args.force)
    return None
