"""Argument types and the arguments many commands share (global arguments, -g, -w, -e, --yes)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from ._context import UsageError
from ._format import OUTPUT_FORMATS, compile_query


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


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


_positive = _int_at_least(1)
_non_negative = _int_at_least(0)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


def _global_arguments() -> argparse.ArgumentParser:
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
    group.add_argument("--only-show-errors", action="store_true", default=argparse.SUPPRESS, help="no notes")
    return parent


def _rg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--resource-group",
        "-g",
        dest="resource_group",
        metavar="GROUP",
        help="resource group (default: the profile's defaults.group)",
    )


def _ws(p: argparse.ArgumentParser, *extra: str) -> None:
    p.add_argument(
        "--workspace",
        "-w",
        *extra,
        dest="workspace",
        metavar="WORKSPACE",
        help="workspace (default: the profile's defaults.workspace)",
    )


def _exp(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--experiment",
        "-e",
        dest="experiment",
        metavar="EXPERIMENT",
        help="experiment (default: the profile's defaults.experiment)",
    )


def _yes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
