"""What the training scripts share for reporting a problem the user can fix."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A problem the user can fix (bad data, no checkpoint...): printed as ``error: ...``, exit status 2."""


def to_stderr(line: str) -> None:
    """Write ``line`` to stderr in one write and flush it.

    print() writes the text and the newline separately, and mpirun then interleaves the ranks' messages on
    one line.
    """
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
