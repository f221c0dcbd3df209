"""A request's fields, checked (standard library only): each ``check_*`` of ``requests.py`` and
``cluster.py`` is built from these, and a field that is not what it should be raises ``RequestError``
naming it, with its value cut short (the scheduler answers it without a change to anything)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from .names import NAME

MAX_ITEMS = 10_000  # entries of one list or object
REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# a host name or address, never an ssh option ("-o..."); empty while an Azure node has none yet
HOST = re.compile(r"^([A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]{0,252})?$")
PRINTABLE = re.compile(r"^[^\x00-\x1f]{0,255}$")  # a label: a machine key, a creation time
NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
WEEKS_52 = 52 * 7 * 24 * 3600.0


class RequestError(Exception):
    """A request the scheduler refuses; ``code`` tells the client which typed error to raise."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def invalid(field: str, value: Any, expected: str) -> RequestError:
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:80] + "..."
    return RequestError("invalid", f"{field}: {shown} is not {expected}")


# -- fields -----------------------------------------------------------------------------------------------
def text(
    doc: Mapping[str, Any], field: str, pattern: re.Pattern[str] | None = None, *, optional: bool = False
) -> str | None:
    value = doc.get(field)
    if value is None and optional:
        return None
    if not isinstance(value, str) or (pattern is not None and not pattern.match(value)) or "\0" in value:
        raise invalid(field, value, "a valid name" if pattern is not None else "a string")
    return value


def integer(doc: Mapping[str, Any], field: str, low: int, high: int, *, optional: bool = False) -> int | None:
    value = doc.get(field)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(field, value, f"an integer from {low} to {high}")
    return value


def number(
    doc: Mapping[str, Any], field: str, low: float, high: float, *, above: bool = False, optional: bool = True
) -> float | None:
    """A finite number in [low, high] (``above``: greater than ``low``), or None when optional."""
    value = doc.get(field)
    if value is None and optional:
        return None
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > low if above else value >= low)
        and value <= high
    ):
        return float(value)
    bound = f"> {low:g}" if above else f">= {low:g}"
    raise invalid(field, value, f"a finite number {bound} and <= {high:g}")


def string_map(doc: Mapping[str, Any], field: str, key_pattern: re.Pattern[str]) -> dict[str, str]:
    value = doc.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and key_pattern.match(k) and isinstance(v, str) and "\0" not in v
        for k, v in value.items()
    ):
        raise invalid(field, value, "an object of variable names to strings")
    return dict(value)


def name(doc: Mapping[str, Any], field: str) -> str:
    return text(doc, field, NAME) or ""  # text raises for a missing one: never ""
