"""A job's files as its handle reads them: only what lies inside the job's own folders.

A job writes to the share, so it can plant symbolic links there (``passwd.txt -> /etc/passwd``, a folder
swapped for a link to ``/etc`` or to another job's outputs). ``Job.tail``, ``stream``, ``files`` and
``download`` resolve the path they are about to read and refuse it unless it resolves inside one of the
job's folders as written (its logs, its output directories, the folder of its ``--dir`` argument): a link
anywhere on the way that leads elsewhere — out of the share, or to another folder on it — is refused, and
a listing leaves such links out.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._models import FileInfo
from .exceptions import ValidationError
from .share import Share, normalize


def _within(path: str, roots: list[str]) -> bool:
    return any(root == "" or path == root or path.startswith(root + "/") for root in roots)


def confined(share: Share, path: str, roots: Iterable[str], name: str) -> str:
    """``path`` when it resolves inside one of the job's folders ``roots`` (or is not there at all);
    otherwise a ValidationError naming ``name``, what the caller asked for."""
    real = share.real_path(path)
    if real is None and not share.exists(path):
        return path  # nothing there (yet): reading it finds nothing either
    if real is None or not _within(real, [normalize(r) for r in roots]):
        raise ValidationError(
            "name", name, "a file inside the job's folders (this one leads out through a link)"
        )
    return path


def list_confined(share: Share, path: str, roots: Iterable[str], name: str) -> list[FileInfo]:
    """The entries of the job's folder ``path``, without the links that lead out of the job's folders."""
    inside = [normalize(r) for r in roots]
    confined(share, path, inside, name)
    links = share.link_targets(path) if share.exists(path) else {}

    def keep(entry: FileInfo) -> bool:
        if entry.name not in links:
            return True
        target = links[entry.name]
        return target is not None and _within(target, inside)

    return [entry for entry in share.list(path) if keep(entry)]
