"""Values inside Batch AI JSON strings: durations (``PT1H30M``, ``1.00:00:00``) and command line arguments."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from decimal import Decimal, InvalidOperation

_ISO_DURATION_RE = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)
_TIMESPAN_RE = re.compile(
    r"^(?:(?P<days>\d+)\.)?(?P<hours>\d{1,2}):(?P<minutes>\d{1,2}):(?P<seconds>\d{1,2}(?:\.\d{1,7})?)$"
)
# Arguments written bare by to_job_json; anything else is double-quoted (which keeps $VARS expandable).
_BARE_ARG_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./${}-]+$")

# --------------------------------------------------------------------------------------------------
# durations


def parse_duration(text: str) -> float:
    """Seconds in an ISO-8601 duration (``PT1H30M``, ``P1DT2H``) or a .NET TimeSpan (``1.00:00:00``).

    Raises ValueError when ``text`` is neither, uses years or months, is zero or is too large.
    """
    iso = _ISO_DURATION_RE.fullmatch(text)
    span = None if iso else _TIMESPAN_RE.fullmatch(text)
    if iso and any(iso.groupdict().values()) and not text.endswith("T"):
        parts = iso.groupdict()
        factors = {"weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
    elif span:
        parts = span.groupdict()
        if int(parts["hours"]) > 23 or int(parts["minutes"]) > 59 or Decimal(parts["seconds"]) >= 60:
            raise ValueError(f"{text!r}: hours must be < 24, minutes and seconds < 60")
        factors = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
    else:
        raise ValueError(f"{text!r} is not a duration like 'PT1H30M' or '1.00:00:00'")
    try:
        total = sum((Decimal(parts[k]) * f for k, f in factors.items() if parts.get(k)), Decimal(0))
        seconds = float(total)
    except (InvalidOperation, OverflowError):
        raise ValueError(f"{text!r} is too large") from None
    if not math.isfinite(seconds) or seconds > 1e15:
        raise ValueError(f"{text!r} is too large")
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def format_duration(seconds: float) -> str:
    """An ISO-8601 duration that ``parse_duration`` reads back as exactly ``seconds``."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"not a positive duration: {seconds!r}")
    if seconds == int(seconds) and seconds < 1e15:
        whole = int(seconds)
        hours, rest = divmod(whole, 3600)
        minutes, secs = divmod(rest, 60)
        out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
        return out + (f"{secs}S" if secs or out == "PT" else "")
    # repr is the shortest text that reads back as the same float; Decimal spells it without exponent.
    return f"PT{Decimal(repr(float(seconds))):f}S"


# --------------------------------------------------------------------------------------------------
# command line arguments


def _quote_arg(arg: str) -> str:
    if _BARE_ARG_RE.fullmatch(arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def join_args(args: Collection[str]) -> str:
    """``commandLineArgs`` for ``args``: ``shlex.split`` gives them back; ``$VARS`` stay expandable."""
    return " ".join(_quote_arg(a) for a in args)
