"""The command table: the command groups in the order ``batchai --help`` lists them; each group module
registers its commands, their arguments and their handlers."""

from __future__ import annotations

import argparse

from .. import __version__
from . import cluster, configure, experiment, group, job, resource, storage, sweep, workspace
from ._params import Commands, Parser, examples_epilog, global_arguments

GROUPS = (group, workspace, experiment, cluster, job, storage, sweep, resource, configure)

# The tutorial's first steps, as `batchai --help` shows them (docs/cli.md starts with the same lines).
EXAMPLES = (
    "batchai group create --name batchai.horovod --location eastus",
    "batchai workspace create --resource-group batchai.horovod --workspace batchaidev",
    "batchai experiment create -g batchai.horovod -w batchaidev --name cifar",
    "batchai cluster create -g batchai.horovod -w batchaidev --name nc6cluster --target 2",
    "batchai job create -g batchai.horovod -w batchaidev -e cifar -n cifar_dist -c nc6cluster "
    "--config-file job.json",
)


def build_parser() -> argparse.ArgumentParser:
    """The ``batchai`` parser: every command group, command and option, with help and examples."""
    common = global_arguments()
    root = Parser(
        prog="batchai",
        description="Azure Batch AI's az commands, client-side: the same flags with 'batchai' in place of "
        "'az batchai', and 'batchai storage' / 'batchai group' in place of 'az storage' / 'az group'.",
        parents=[common],
        epilog=examples_epilog(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"batchai {__version__}")
    subparsers = root.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    commands = Commands(subparsers, common)
    for module in GROUPS:
        module.register(commands)
    return root
