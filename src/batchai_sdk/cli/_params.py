"""How commands are declared: the ``Commands`` a group module registers into, the argument types, and the
arguments many commands share (global arguments, -g, -w, -e, --yes)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ._context import Handler, UsageError
from ._format import OUTPUT_FORMATS, compile_query

EXAMPLES_HEADING = "examples:"


def examples_epilog(examples: Sequence[str]) -> str | None:
    """The "examples:" section of a ``--help`` (as az prints it), one command line a line."""
    if not examples:
        return None
    return "\n".join([EXAMPLES_HEADING, *(f"  {line}" for line in examples)])


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors raise ``UsageError`` (exit status 2, one error line)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


class Commands:
    """The subcommands of one parser; every command and group added here accepts the global arguments."""

    def __init__(self, subparsers: Any, common: argparse.ArgumentParser) -> None:
        self._subparsers = subparsers
        self._common = common

    def command(
        self, name: str, handler: Handler, help_text: str, examples: Sequence[str] = ()
    ) -> argparse.ArgumentParser:
        """A command that runs ``handler``; the caller adds its arguments to the parser returned.

        ``examples``: whole command lines (``batchai ...``) that ``--help`` lists under "examples:".
        """
        p = self._parser(name, help_text, examples)
        p.set_defaults(handler=handler)
        return p

    def _parser(self, name: str, help_text: str, examples: Sequence[str]) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._subparsers.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[self._common],
            epilog=examples_epilog(examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return parser

    def group(self, name: str, help_text: str, examples: Sequence[str] = ()) -> Commands:
        """A command group (``batchai NAME COMMAND``) to add commands or groups to.

        ``examples``: az-style command lines of the group that ``batchai NAME --help`` lists.
        """
        p = self._parser(name, help_text, examples)
        subparsers = p.add_subparsers(
            dest=f"{name}_command", metavar="COMMAND", required=True, parser_class=Parser
        )
        return Commands(subparsers, self._common)


def _query_type(text: str) -> Any:
    try:
        return compile_query(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


positive = _int_at_least(1)
non_negative = _int_at_least(0)


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def global_arguments() -> argparse.ArgumentParser:
    """Accepted before or after the command, as in az (SUPPRESS: a subcommand does not reset them)."""
    parent = Parser(add_help=False)
    group = parent.add_argument_group("global arguments")
    group.add_argument(
        "--output",
        "-o",
        choices=OUTPUT_FORMATS,
        default=argparse.SUPPRESS,
        help="output format (default: json, or the profile's defaults.output)",
    )
    group.add_argument(
        "--query",
        type=_query_type,
        default=argparse.SUPPRESS,
        metavar="JMESPATH",
        help="JMESPath query applied to the result, as in az",
    )
    group.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="log everything; tracebacks"
    )
    group.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress")
    group.add_argument(
        "--root",
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="work on the local workspace kept in DIR, as Workspace.local(root=DIR) (without --root, -g "
        "and -w: the default one in $BATCHAI_HOME, as Workspace.local())",
    )
    group.add_argument("--only-show-errors", action="store_true", default=argparse.SUPPRESS, help="no notes")
    return parent


def resource_group_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resource-group",
        "-g",
        dest="resource_group",
        metavar="GROUP",
        help="resource group (default: the profile's defaults.group)",
    )


def workspace_arg(p: argparse.ArgumentParser, *extra: str) -> None:
    """``--workspace/-w`` (``extra``: more spellings, e.g. ``--name -n`` for the workspace commands)."""
    p.add_argument(
        "--workspace",
        "-w",
        *extra,
        dest="workspace",
        metavar="WORKSPACE",
        help="workspace (default: the profile's defaults.workspace)",
    )


def experiment_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--experiment",
        "-e",
        dest="experiment",
        metavar="EXPERIMENT",
        help="experiment (default: the profile's defaults.experiment, else 'default': job create makes it)",
    )


def yes_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
