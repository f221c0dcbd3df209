"""``batchai experiment ...``: named groups of jobs."""

from __future__ import annotations

import argparse

from ._context import Context, Result
from ._format import experiment_table, experiment_view
from ._params import Commands, resource_group_arg, workspace_arg, yes_arg


def register(commands: Commands) -> None:
    e = commands.group(
        "experiment",
        "experiments: named groups of jobs",
        examples=(
            "batchai experiment create -g batchai.horovod -w batchaidev -n cifar",
            "batchai experiment show -g batchai.horovod -w batchaidev -n cifar",
            "batchai experiment list -g batchai.horovod -w batchaidev --output table",
            "batchai experiment delete -g batchai.horovod -w batchaidev -n cifar --force --yes",
        ),
    )
    for name, handler, text in (
        ("create", experiment_create, "create an experiment (returns the existing one if it exists)"),
        ("show", experiment_show, "show an experiment"),
        ("delete", experiment_delete, "delete an experiment and its jobs"),
    ):
        p = e.command(name, handler, text)
        resource_group_arg(p)
        workspace_arg(p)
        p.add_argument("--name", "-n", required=True, help="the experiment")
        if name == "delete":
            p.add_argument("--force", action="store_true", help="terminate jobs that have not ended")
            yes_arg(p)
    p = e.command("list", experiment_list, "list experiments")
    resource_group_arg(p)
    workspace_arg(p)


def experiment_create(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    ws = ctx.open_workspace(group)
    exp = ws.create_experiment(args.name, exist_ok=True)
    return Result(experiment_view(exp, group), experiment_table)


def experiment_show(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    return Result(
        experiment_view(ctx.open_workspace(group).get_experiment(args.name), group), experiment_table
    )


def experiment_list(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    return Result(
        [experiment_view(e, group) for e in ctx.open_workspace(group).list_experiments()], experiment_table
    )


def experiment_delete(ctx: Context, args: argparse.Namespace) -> Result | None:
    group = ctx.scope()
    ws = ctx.open_workspace(group)
    ws.get_experiment(args.name)
    ctx.confirm(f"delete experiment {args.name!r} and its jobs")
    ws.delete_experiment(args.name, force=args.force)
    return None
