"""A job's whole code directory, staged to the share: which files go (``code_files``), a content hash that
lets an unchanged directory skip the upload (``code_hash``), and the upload itself (``stage_code``).

What is left out: the defaults below (version control, caches, virtual environments — any folder holding a
``pyvenv.cfg`` — and compiled Python), then whatever ``.batchaiignore`` in the directory says, in
gitignore syntax (``pathspec``'s ``GitIgnoreSpec``): later lines win, ``!pattern`` re-includes a file the
defaults left out, and a folder left out is not entered. Symbolic links are followed when they stay inside
the directory and refused (``UnsafeSymlinkError``) when they point outside it or nowhere: a job's code
never carries a file from elsewhere on the submitting machine. A directory larger than ``max_bytes``
(default 100 MiB; ``BATCHAI_CODE_DIR_MAX_MB`` changes the default) is refused with ``CodeDirTooLargeError``,
which names its largest files.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import posixpath
import uuid
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from . import _progress
from ._models import utcnow
from ._requirements import check_requirements
from .exceptions import NotFoundError, ShareError, ValidationError
from .launch import launch_config, on_node
from .node.protocol.paths import LAUNCH_CONFIG
from .node.protocol.records import StatusDoc
from .share import Share, join
from .train import SCRIPTS, module_path

if TYPE_CHECKING:
    import pathspec

    from .backends.base import Backend, LaunchTarget
    from .job import Job

__all__ = [
    "DEFAULT_IGNORE",
    "IGNORE_FILE",
    "CodeDirTooLargeError",
    "UnsafeSymlinkError",
    "code_files",
    "code_hash",
    "default_max_bytes",
    "ensure_node_code",
    "node_code",
    "stage_code",
    "stage_job",
]
log = logging.getLogger("batchai_sdk")

IGNORE_FILE = ".batchaiignore"
DEFAULT_IGNORE = (
    ".git/",
    ".hg/",
    ".svn/",
    "__pycache__/",
    "*.py[cod]",
    ".venv/",
    "venv/",
    ".ipynb_checkpoints/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".tox/",
    ".nox/",
    ".batchai/",
    ".DS_Store",
)
_MiB = 1024 * 1024


class CodeDirTooLargeError(ValidationError):
    """The code directory holds more than the limit; ``largest``: (relative path, bytes), largest first."""

    def __init__(self, source: Path, total: int, limit: int, largest: list[tuple[str, int]]) -> None:
        self.source = source
        self.total = total
        self.limit = limit
        self.largest = largest
        top = ", ".join(f"{name} ({size / _MiB:.1f} MiB)" for name, size in largest)
        expected = (
            f"at most {limit / _MiB:.1f} MiB of code; largest files: {top}. Put data on the share "
            f"(input_directories), list what the job does not need in {IGNORE_FILE}, or raise the limit "
            "(max_bytes= / BATCHAI_CODE_DIR_MAX_MB)"
        )
        super().__init__("source_dir", str(source), expected)
        self.args = (f"code directory {source} holds {total / _MiB:.1f} MiB: expected {expected}",)


class UnsafeSymlinkError(ValidationError):
    """A symbolic link in the code directory points outside it, or nowhere."""

    def __init__(self, link: Path, target: str, why: str) -> None:
        self.link = link
        self.target = target
        super().__init__("source_dir", str(link), f"no symbolic link that {why} (it points to {target})")


def default_max_bytes() -> int:
    """100 MiB, or ``BATCHAI_CODE_DIR_MAX_MB`` MiB."""
    raw = os.environ.get("BATCHAI_CODE_DIR_MAX_MB")
    if raw is None:
        return 100 * _MiB
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError("BATCHAI_CODE_DIR_MAX_MB", raw, "a number of MiB") from None
    if not value > 0:
        raise ValidationError("BATCHAI_CODE_DIR_MAX_MB", raw, "a number of MiB > 0")
    return int(value * _MiB)


def _spec(source: Path) -> pathspec.GitIgnoreSpec:
    import pathspec  # on first use: it costs ~10 ms at import, and only a submit stages code

    lines = list(DEFAULT_IGNORE)
    ignore = source / IGNORE_FILE
    if ignore.is_file():
        lines += ignore.read_text(encoding="utf-8").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines)


def code_files(source: str | os.PathLike[str], *, max_bytes: int | None = None) -> list[Path]:
    """The files of ``source`` that a job gets, as paths relative to it (POSIX order, sorted).

    Raises NotFoundError when ``source`` is not a directory, UnsafeSymlinkError for a link that leaves it
    or dangles, CodeDirTooLargeError above ``max_bytes`` (``default_max_bytes()`` when None).
    """
    root = Path(source).expanduser()
    if not root.is_dir():
        raise NotFoundError("code directory", str(root))
    real_root = root.resolve()
    spec = _spec(root)
    limit = default_max_bytes() if max_bytes is None else max_bytes
    found: list[tuple[Path, int]] = []
    visited: set[Path] = set()

    def inside(link: Path) -> Path:
        target = os.readlink(link)
        resolved = link.resolve()
        if not resolved.exists():
            raise UnsafeSymlinkError(link, target, "dangles")
        if resolved != real_root and real_root not in resolved.parents:
            raise UnsafeSymlinkError(link, target, f"leaves {root}")
        return resolved

    def walk(folder: Path, rel: str) -> None:
        real = folder.resolve()
        if real in visited:  # a link back into a folder already staged
            return
        visited.add(real)
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                name = posixpath.join(rel, entry.name) if rel else entry.name
                is_link = entry.is_symlink()
                is_dir = (Path(inside(path)) if is_link else path).is_dir()
                if is_dir:
                    if (folder / entry.name / "pyvenv.cfg").is_file() or spec.match_file(name + "/"):
                        continue
                    walk(path, name)
                elif not spec.match_file(name):
                    found.append((Path(name), path.stat().st_size))

    walk(root, "")
    total = sum(size for _, size in found)
    if total > limit:
        largest = sorted(((p.as_posix(), s) for p, s in found), key=lambda t: (-t[1], t[0]))[:5]
        raise CodeDirTooLargeError(root, total, limit, largest)
    return sorted(p for p, _ in found)


def code_hash(source: str | os.PathLike[str], files: list[Path]) -> str:
    """SHA-256 over the files' relative paths, executable bits and contents: equal hashes, equal trees."""
    root = Path(source).expanduser()
    digest = hashlib.sha256()
    for rel in files:
        path = root / rel
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def stage_code(
    share: Share,
    source: str | os.PathLike[str],
    dest_rel: str,
    *,
    max_bytes: int | None = None,
    progress: Callable[[int], None] | None = None,
    show_progress: bool | None = None,
) -> str:
    """Upload the code directory's files (see ``code_files``) under ``dest_rel`` on ``share``, one
    progress bar for all; returns ``dest_rel``. Writes ``<dest_rel>/.batchai-code.sha256`` last: when it
    already holds this tree's hash, nothing is uploaded again."""
    root = Path(source).expanduser()
    files = code_files(root, max_bytes=max_bytes)
    digest = code_hash(root, files)
    marker = join(dest_rel, ".batchai-code.sha256")
    try:
        if share.read_text(marker).strip() == digest:
            return dest_rel
    except NotFoundError:
        pass
    share.mkdir(dest_rel)
    total = sum((root / rel).stat().st_size for rel in files)
    with _progress.transfer(total, f"upload {root.name}/", show_progress) as bar:
        callback = _progress.chain(progress, bar)
        for rel in files:
            share.upload(root / rel, join(dest_rel, rel.as_posix()), progress=callback, show_progress=False)
    share.write_text(marker, digest + "\n")
    return dest_rel


_TRAIN_PACKAGE = "batchai_sdk.train."


def resolve_local_script(script: str) -> Path | None:
    """A local file for ``script``: the file itself, or the file of an importable module name (for a
    ``batchai_sdk.train`` script, the single file ``module_path`` bundles)."""
    path = Path(script).expanduser()
    if path.is_file():
        return path
    looks_like_module = (
        "/" not in script
        and not script.endswith(".py")
        and script.replace(".", "").replace("_", "").isalnum()
    )
    if looks_like_module and script.startswith(_TRAIN_PACKAGE):
        # a shipped training script: its single-file bundle, which runs without batchai_sdk on the nodes
        name = script[len(_TRAIN_PACKAGE) :]
        return module_path(name) if name in SCRIPTS else None
    if looks_like_module:
        try:
            found = importlib.util.find_spec(script)
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin and found.origin.endswith(".py"):
            return Path(found.origin)
    return None


NODE_PACKAGE = Path(__file__).resolve().parent / "node"


@lru_cache(maxsize=1)
def node_code() -> tuple[str, tuple[tuple[str, bytes], ...]]:
    """(digest, files) of the node package, its subfolders included (paths relative to it, with '/'): the
    digest names its folder on the share."""
    files = tuple(
        sorted((p.relative_to(NODE_PACKAGE).as_posix(), p.read_bytes()) for p in NODE_PACKAGE.rglob("*.py"))
    )
    digest = hashlib.sha256(b"".join(name.encode() + b"\0" + data for name, data in files)).hexdigest()
    return digest[:16], files


def ensure_node_code(backend: Backend) -> str:
    """Upload the node code once per version; returns its share-relative folder. ``__main__.py`` is
    written last, so a folder that has it is complete (concurrent uploads write the same bytes)."""
    digest, files = node_code()
    folder = layout.node_code_dir(digest)
    share = backend.share
    if share.exists(posixpath.join(folder, "__main__.py")):
        return folder
    try:
        for name, data in sorted(files, key=lambda f: f[0] == "__main__.py"):
            share.write_bytes(posixpath.join(folder, name), data)
    except OSError as exc:
        raise ShareError(f"could not write the node code to share {share.name!r} ({folder}): {exc}") from exc
    return folder


def stage_job(
    job: Job, target: LaunchTarget, local_script: Path | None, script_rel: str | None, *, evictable: bool
) -> dict[str, Any]:
    """Upload a job's script (or its source_dir), make its folders, write launch.json, the queued status
    and the job record (returned); a share that refuses a write is a ShareError naming what."""
    share = job.workspace.share
    what = "the job's script"
    try:
        if job.spec.source_dir is not None and local_script is not None:  # the whole folder, one tree
            stage_code(share, Path(job.spec.source_dir).expanduser(), job.paths.wd)
            script_rel = join(job.paths.wd, job.spec.python_script or "")
        elif local_script is not None:
            script_rel = share.upload(local_script, join(job.paths.wd, local_script.name))
        else:
            share.mkdir(job.paths.wd)
        script_on_node = on_node(target, script_rel) if script_rel is not None else job.spec.python_script
        what = "the job's folders"
        for directory in (
            job.paths.stdouterr,
            *job.paths.outputs.values(),
            join(job.paths.job_dir, "shared_tmp"),
        ):
            share.mkdir(directory)
        what = "the node code"
        node_main = on_node(target, join(ensure_node_code(job.workspace.backend), "__main__.py"))
        config = launch_config(
            job.spec,
            target,
            job.paths,
            share_name=share.name,
            script_on_node=script_on_node,
            node_main=node_main,
            run_id=uuid.uuid4().hex,
        )
        config["eviction_watch"] = evictable  # Spot / low priority: each node watches for notices
        requirements = check_requirements(
            job.spec, job.workspace.backend.installs_requirements, job.workspace.backend.kind
        )
        if requirements is not None:  # installed by each node's preparation, into the job's venv
            where = (config["python"], target.temp_root, config["wd"])
            config["requirements"] = requirements.node_config(*where)
        config["notes"] = job.workspace.backend.guard_host(config)
        for note in config["notes"]:
            log.warning("job %s: %s", job.name, note)
        config["notes"] += job._mount_notes
        what = "the job's launch configuration"
        share.write_json(join(job.paths.run_dir, LAUNCH_CONFIG), config)
        created = utcnow().isoformat()
        what = "the job's status record"
        share.write_json(job.paths.status, StatusDoc(state="queued", creation_time=created).to_dict())
        record = {
            "spec": job.spec.to_dict(redact=True),
            "paths": job.paths.to_dict(),
            "backend": job.workspace.backend.kind,
            "script_on_node": script_on_node,
            "creation_time": created,
        }
        what = "the job record"
        share.write_json(job.paths.record, record)
    except (OSError, ShareError) as exc:
        raise ShareError(f"could not write {what} to share {share.name!r}: {exc}", job.paths.job_dir) from exc

    return record
