"""Warnings that point at the caller's line, however deep in the SDK they are raised.

``warnings.warn(stacklevel=2)`` names the SDK function that called the one warning (``create_cluster``'s
own line for a retired VM size), which tells a user nothing. ``warn_caller`` counts the frames inside this
package and names the first line outside it: the user's script, notebook cell or test (Python 3.12's
``skip_file_prefixes`` does the same; the SDK supports 3.10).
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_level() -> int:
    """The ``stacklevel`` of the first frame outside batchai_sdk, seen from warn_caller's caller."""
    frame = sys._getframe(2)  # the function that called warn_caller
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def warn_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first line outside the SDK."""
    warnings.warn(message, category, stacklevel=_outside_level())
