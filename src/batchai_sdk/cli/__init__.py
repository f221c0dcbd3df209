"""``batchai``: the Batch AI tutorial's ``az batchai``, ``az storage`` and ``az group`` commands, on the SDK.

A thin layer: every command opens a ``Workspace`` and calls its public API. Resource
groups, the backend of each workspace and the storage-account names live in ``$BATCHAI_HOME``
(see :mod:`batchai_sdk._registry`, which ``Workspace.from_cli`` reads too); output follows az
(:mod:`batchai_sdk.cli._format`). Errors print one line, ``error: ...``, and exit 1 (2 for a command line
that cannot run); ``--debug`` adds the traceback.
docs/cli.md lists every command beside its az original.

The package, laid out like az's batchai module: ``commands`` (the command table), one module per command
group (``group``, ``workspace``, ``experiment``, ``cluster``, ``job``, ``storage``, ``configure``: its
arguments and its handlers side by side), ``_params`` (shared arguments and types), ``_context`` (what a
handler gets and returns), ``_format`` (views, tables, output formats).
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import TextIO

from ..exceptions import BatchAIError
from ._context import Cancelled, Context, Result, UsageError
from ._format import render
from .commands import build_parser

__all__ = ["build_parser", "main"]


# az batchai commands and options this CLI does not have: answered plainly instead of "invalid choice"
UNSUPPORTED = (
    ("file-server",),
    ("cluster", "node", "list"),
    ("cluster", "node", "exec"),
    ("job", "node", "list"),
    ("job", "node", "exec"),
    ("workspace", "update"),
)
# why, where there is more to say than "not supported"
UNSUPPORTED_WHY = {
    "file-server": (
        "Batch AI's NFS file server (a VM exporting /data, from nfs.json) is not made by batchai on any "
        "backend: the workspace share already holds jobs' files everywhere; to mount an NFS server you run, "
        "name it in a cluster.json or job.json (mountVolumes.fileServers: the server's name, or "
        "unmanagedFileSystems with its mount command) — see docs/cluster-json.md, 'File servers'"
    ),
}
UNSUPPORTED_OPTIONS = ("--user-assigned-identity",)


def unsupported_command(argv: list[str]) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    for command in UNSUPPORTED:
        if tuple(words[: len(command)]) == command:
            return " ".join(command)
    for option in UNSUPPORTED_OPTIONS:
        if any(a == option or a.startswith(option + "=") for a in argv):
            return " ".join([*words[:2], option])
    return None


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def _setup_logging(args: argparse.Namespace) -> logging.Handler | None:
    """Log to stderr for --verbose/--debug; returns the handler so that main() removes it again."""
    level = (
        logging.DEBUG
        if getattr(args, "debug", False)
        else logging.INFO
        if getattr(args, "verbose", False)
        else None
    )
    if level is None:
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("batchai_sdk")
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def run(args: argparse.Namespace) -> int:
    """Run a parsed command line; returns the exit status."""
    ctx = Context(args)
    if getattr(args, "only_show_errors", False):
        ctx.note = lambda text: None  # type: ignore[method-assign]
    try:
        result: Result | None = args.handler(ctx, args)
    finally:
        ctx.close()
    if result is None:
        return 0
    if result.value is None:  # the command printed what it had to (a stream); only its status is left
        return result.exit_code
    output = getattr(args, "output", None) or ctx.profile.default("output") or "json"
    text = render(result.value, output=output, query=getattr(args, "query", None), table=result.table)
    if text:
        print(text, flush=True)
    return result.exit_code


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning the SDK gives while a command runs, as one line: ``warning: ...``. Python's own form
    names the caller's file and line, which from the CLI is the console script (``.venv/bin/batchai:6``)."""
    print(f"warning: {message}", file=file or sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """``batchai ...``: returns the exit status (the console script exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    handler: logging.Handler | None = None
    if not [a for a in argv if a not in ("--debug", "--verbose", "--only-show-errors")]:
        build_parser().print_help()  # bare `batchai`, as `az batchai` does
        return 0
    from .sweep import deprecated_form

    renamed = deprecated_form(argv)
    if renamed is not None:
        print(
            "WARNING: `batchai sweep` (the Azure resource lister) is renamed `batchai resource list`; "
            "`batchai sweep create` runs a hyperparameter sweep now",
            file=sys.stderr,
        )
        argv = renamed
    unsupported = unsupported_command(argv)
    if unsupported:
        why = UNSUPPORTED_WHY.get(unsupported.split()[0])
        _error(
            f"`batchai {unsupported}` is not supported by batchai (see docs/cli.md, 'Not supported')"
            + (f": {why}" if why else "")
        )
        return 2
    try:
        args = build_parser().parse_args(argv)
        handler = _setup_logging(args)
        with warnings.catch_warnings():  # restores showwarning for a caller of main() (tests, scripts)
            warnings.showwarning = _show_warning
            if getattr(args, "only_show_errors", False):  # as az: errors only, no warnings
                warnings.simplefilter("ignore")
            return run(args)
    except UsageError as exc:
        _error(str(exc))
        return 2
    except Cancelled:
        print("Operation cancelled.", file=sys.stderr)
        return 1
    except BatchAIError as exc:
        if debug:
            traceback.print_exc()
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f": {exc.filename}" if exc.filename else ""
        _error(f"{exc.strerror or exc}{where}")
        return 1
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        _error(f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)")
        return 1
    finally:
        if handler is not None:
            logger = logging.getLogger("batchai_sdk")
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console()
