"""The options a job runs under, as ``job create`` takes them (``sweep create`` shares them): the flags of
``create_job``'s keywords beyond what the job runs — its wall clock limit, hang notice and watchdog,
retries, queue priority and health gate. Each flag overrides the same setting of ``--config-file``
(``constraints.maxWallClockTime``, ``schedulingPriority``, the ``batchaiSdk`` object).

``add_job_run_options(parser)`` adds them; ``job_run_options(args)`` gives the ``create_job`` keywords
(``JobSpec`` field names) of the flags given, to pass to ``create_job(**...)`` or ``spec.replace(**...)``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..batchai_json.values import parse_duration
from ..node.names import LEVELS, PRIORITIES

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str, *, zero: bool = False) -> float:
    """Seconds from ``90``, ``90s``, ``30m``, ``2h``, ``1d``, ``PT1H30M`` or ``1.00:00:00``."""
    value: float | None = None
    raw = text.strip().lower()
    try:
        value = float(raw[:-1]) * _UNITS[raw[-1]] if raw and raw[-1] in _UNITS else float(raw)
    except ValueError:
        try:
            value = parse_duration(text.strip())
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = ">= 0 (0: off)" if zero else "> 0"
        raise argparse.ArgumentTypeError(
            f"expected a duration {least} such as 90, 30m, 2h, PT1H30M or 1.00:00:00; got {text!r}"
        )
    return value


def _off_or_duration(text: str) -> float:
    return duration(text, zero=True)


def _exit_codes(text: str) -> list[int]:
    """``3`` or ``3,75``: exit codes 1..255."""
    codes: list[int] = []
    for part in text.split(","):
        try:
            code = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected exit codes such as 3 or 3,75; got {text!r}") from None
        if not 1 <= code <= 255:
            raise argparse.ArgumentTypeError(f"an exit code is 1..255, got {code}")
        codes.append(code)
    return codes


def _retries(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def add_job_run_options(parser: argparse.ArgumentParser) -> None:
    """The flags of the settings a job runs under (see the module's docstring)."""
    group = parser.add_argument_group("how the job runs (override --config-file)")
    group.add_argument(
        "--max-wall-clock-time",
        type=duration,
        metavar="DURATION",
        help="end the job once it has run this long (90, 30m, 2h, 1.00:00:00; job.json's "
        "constraints.maxWallClockTime); also what a queued job's estimated start is made of",
    )
    group.add_argument(
        "--hang-notice",
        type=_off_or_duration,
        metavar="DURATION",
        help="say 'possibly hung' (with the ranks' stacks) after this long without progress; the job goes "
        "on (default 10m; 0: off)",
    )
    group.add_argument(
        "--hang-timeout",
        type=_off_or_duration,
        metavar="DURATION",
        help="end the job after this long without progress, with the ranks' stacks (0: off)",
    )
    group.add_argument(
        "--max-retries", type=_retries, help="requeue after a lost node or a listed exit code, this often"
    )
    group.add_argument(
        "--retry-on-exit-codes",
        "--retry-on-exit-code",
        dest="retry_on_exit_codes",
        type=_exit_codes,
        action="append",
        default=None,
        metavar="CODES",
        help="exit codes that requeue the job: 3 or 3,75 (repeatable)",
    )
    group.add_argument(
        "--priority",
        choices=list(PRIORITIES),
        type=str.lower,
        help="the cluster queue's order: higher first, then first come (job.json's schedulingPriority)",
    )
    group.add_argument(
        "--health-check",
        choices=[level for level in LEVELS if level != "off"],
        type=str.lower,
        help="its nodes pass this health gate right before it starts; a failing node is kept out",
    )


def job_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``JobSpec`` fields of the flags given (none given: ``{}``)."""
    options: dict[str, Any] = {}
    if getattr(args, "max_wall_clock_time", None) is not None:
        options["max_wall_clock_seconds"] = args.max_wall_clock_time
    if getattr(args, "hang_notice", None) is not None:
        options["hang_notice"] = args.hang_notice
    if getattr(args, "hang_timeout", None) is not None:
        options["hang_timeout"] = args.hang_timeout
    if getattr(args, "max_retries", None) is not None:
        options["max_retries"] = args.max_retries
    if getattr(args, "retry_on_exit_codes", None):
        options["retry_on_exit_codes"] = tuple(c for codes in args.retry_on_exit_codes for c in codes)
    if getattr(args, "priority", None) is not None:
        options["scheduling_priority"] = args.priority
    if getattr(args, "health_check", None) is not None:
        options["health_check"] = args.health_check
    return options
