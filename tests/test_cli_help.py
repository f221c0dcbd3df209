"""`batchai ... --help` as az's: every group and command answers, every option says what it is for,
and every command group lists az-style examples that run as written and match docs/cli.md."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from batchai_sdk.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


PARSERS = list(_walk(build_parser()))
GROUPS = [path for path, p in PARSERS if _subcommands(p)]
COMMANDS = [path for path, p in PARSERS if path and not _subcommands(p)]


def _help(capsys: pytest.CaptureFixture[str], path: tuple[str, ...]) -> str:
    code = main([*path, "--help"])
    out, err = capsys.readouterr()
    assert code == 0, f"batchai {' '.join(path)} --help -> {code}: {err}"
    return out


def _examples(text: str) -> list[str]:
    """The command lines under "examples:" at the end of a --help."""
    _head, sep, tail = text.partition("\nexamples:\n")
    assert sep, "no examples: section"
    return [line.strip() for line in tail.splitlines() if line.strip()]


def test_the_walk_finds_every_group_and_command() -> None:
    assert {"group", "workspace", "experiment", "cluster", "job", "storage"} <= {g[0] for g in GROUPS if g}
    assert ("storage", "file") in GROUPS and ("job", "file") in GROUPS
    assert ("job", "file", "stream") in COMMANDS and ("configure",) in COMMANDS
    assert len(COMMANDS) >= 35


@pytest.mark.parametrize("path", [p for p, _ in PARSERS], ids=lambda p: " ".join(p) or "batchai")
def test_every_help_exits_0_and_every_option_says_what_it_is_for(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _help(capsys, path)
    assert out.startswith(f"usage: {' '.join(('batchai', *path))}")
    parser = dict(PARSERS)[path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (
            f"batchai {' '.join(path)} {'/'.join(action.option_strings)} has no help text"
        )
        assert action.help.split()[0] in out  # and --help shows it


@pytest.mark.parametrize("path", [*GROUPS, ("configure",)], ids=lambda p: " ".join(p) or "batchai")
def test_every_group_shows_examples_that_parse(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    examples = _examples(_help(capsys, path))
    assert examples
    parser = build_parser()
    for line in examples:
        argv = shlex.split(line)
        assert argv[0] == "batchai"
        assert tuple(argv[1 : 1 + len(path)]) == path, f"{line!r} is not a {' '.join(path)} command"
        args = parser.parse_args(argv[1:])  # a UsageError here: the example does not run as written
        assert callable(args.handler)
    # Each command of the group appears in one of its examples (subgroups show their own).
    parser_of = dict(PARSERS)
    for name in _subcommands(parser_of[path]) if path else []:
        if _subcommands(parser_of[(*path, name)]):
            continue
        prefix = " ".join(("batchai", *path, name)) + " "
        assert any(line.startswith(prefix) for line in examples), f"no example of {prefix.strip()}"


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_is_in_the_cli_reference(path: tuple[str, ...]) -> None:
    *group, leaf = path
    # `storage account show / list / delete` lists several commands in one row
    pattern = r"`" + re.escape(" ".join(group) + " " if group else "") + r"(?:[\w-]+ / )*" + re.escape(leaf)
    assert re.search(pattern + r"[` ]", CLI_DOC), f"docs/cli.md does not list `{' '.join(path)}`"
