"""What to do next, added to a failure reason where the reason alone would leave a newcomer guessing.

A script that imports a module beside it fails on the node with ``ModuleNotFoundError: No module named
'helpers'`` when only the script was uploaded: the fix is ``source_dir=`` (``--source-dir`` on the CLI),
which nothing in the bare error suggests. A job whose preparation the local backend skipped (it would have
installed packages on the user's own computer) and that then fails says so: the package it lacks is most
likely the one the preparation installed. Both are added when the status is read (client side).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from pathlib import Path

from ._models import JobSpec

_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[\w.]+)'")
SOURCE_DIR_HINT = "pass source_dir="
SKIPPED = "note: this job ran without what the backend skipped"
CLI_SOURCE_DIR_HINT = "pass --source-dir"


def with_skipped(reason: str | None, notes: Sequence[str]) -> str | None:
    """``reason`` naming what the backend left out of the job (a job preparation that would have installed
    the package the job then missed): the job's notes, written at submit."""
    if not reason or not notes or SKIPPED in reason:
        return reason
    return f"{reason} ({SKIPPED}: {'; '.join(notes)})"


def with_hint(reason: str | None, spec: JobSpec) -> str | None:
    """``reason`` with the ``source_dir`` hint when a module next to an uploaded lone script is missing
    (the module is a file or package beside the script on this machine)."""
    if not reason or spec.source_dir is not None or not spec.python_script:
        return reason
    script = spec.python_script
    if not script.endswith(".py") or "$" in script or SOURCE_DIR_HINT in reason:
        return reason  # a module name or a share path: nothing was uploaded from a folder
    found = _MISSING_MODULE.search(reason)
    if found is None:
        return reason
    folder = Path(script).expanduser().parent
    top = found["name"].split(".")[0]
    if not ((folder / f"{top}.py").is_file() or (folder / top).is_dir()):
        return reason  # not a module of the script's folder: an uninstalled package, source_dir won't help
    name = posixpath.basename(script.replace("\\", "/"))
    return (
        f"{reason} (only {name} was uploaded: {SOURCE_DIR_HINT} its project folder to upload the modules "
        "beside it too)"
    )


def cli_reason(reason: str | None) -> str | None:
    """The same reason as the CLI says it: its flag instead of the keyword."""
    return reason.replace(SOURCE_DIR_HINT, CLI_SOURCE_DIR_HINT) if reason else reason
