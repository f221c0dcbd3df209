"""The command table: the command groups in the order ``batchai --help`` lists them; each group module
registers its commands, their arguments and their handlers."""

from __future__ import annotations

import argparse

from .. import __version__
from . import cluster, configure, experiment, group, job, storage, sweep, workspace
from ._params import Commands, Parser, global_arguments

GROUPS = (group, workspace, experiment, cluster, job, storage, sweep, configure)


def build_parser() -> argparse.ArgumentParser:
    common = global_arguments()
    root = Parser(
        prog="batchai",
        description="Azure Batch AI's az commands, client-side: the same flags with 'batchai' in place of "
        "'az batchai', and 'batchai storage' / 'batchai group' in place of 'az storage' / 'az group'.",
        parents=[common],
    )
    root.add_argument("--version", action="version", version=f"batchai {__version__}")
    subparsers = root.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    commands = Commands(subparsers, common)
    for module in GROUPS:
        module.register(commands)
    return root
