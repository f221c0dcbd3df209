"""Paths written with Batch AI's mount variables, resolved against the mount lists: the one place that does.

``$AZ_BATCHAI_JOB_MOUNT_ROOT/<relativeMountPath>/...`` names one of the job's mounts (or the workspace
share at the job's ``mount_path``; a job with neither mounts nor ``mount_path`` sees the share itself at its
job mount root). ``$AZ_BATCHAI_MOUNT_ROOT/<relativeMountPath>/...`` names one of the cluster's mounts (or
the workspace share under its own name). Everything that reads such a path — the script lookup,
stdOutErrPathPrefix, output directories, the job-create check of the cluster's mounts, the links the rank
shim makes — asks here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .mounts import Mount, find
from .share import normalize

if TYPE_CHECKING:
    from ._models import JobSpec

JOB_ROOT = "AZ_BATCHAI_JOB_MOUNT_ROOT"
CLUSTER_ROOT = "AZ_BATCHAI_MOUNT_ROOT"
_VAR = r"\$(?:\{%s\}|%s\b)"
_JOB_RE = re.compile("^" + _VAR % (JOB_ROOT, JOB_ROOT) + "(/.*)?$")
_CLUSTER_RE = re.compile("^" + _VAR % (CLUSTER_ROOT, CLUSTER_ROOT) + "(/.*)?$")
# a cluster mount named anywhere in a string (a command line, an argument, a variable's value)
_CLUSTER_ANYWHERE = re.compile(_VAR % (CLUSTER_ROOT, CLUSTER_ROOT) + r"/([A-Za-z0-9_][A-Za-z0-9._-]{0,63})")


@dataclass(frozen=True)
class Resolved:
    """Where a path lies: ``on`` is ``"share"`` (the workspace share), ``"job"`` (a job mount) or
    ``"cluster"`` (a cluster mount; ``mount`` None when the cluster does not declare ``name``)."""

    on: str
    name: str  # the relativeMountPath (the share's name for the workspace share)
    rest: str  # normalized path inside it ("" for its root)
    mount: Mount | None = None


def job_root_is_share(spec: JobSpec) -> bool:
    """A job without mounts and ``mount_path`` sees the workspace share at ``$AZ_BATCHAI_JOB_MOUNT_ROOT``."""
    return not spec.mount_path and not spec.mounts


def resolve(
    path: str,
    *,
    share_name: str,
    mount_path: str | None,
    job_mounts: Iterable[Mount] = (),
    cluster_mounts: Iterable[Mount] = (),
) -> Resolved | None:
    """Where ``path`` lies, or None when it is written without Batch AI's variables or names no mount of
    the job (a ``$AZ_BATCHAI_MOUNT_ROOT/<name>`` is always resolved: ``mount`` None when undeclared)."""
    job_mounts = tuple(job_mounts)
    m = _JOB_RE.match(path)
    if m:
        rest = (m.group(1) or "").lstrip("/")
        if not mount_path and not job_mounts:
            return Resolved("share", share_name, normalize(rest))
        head, _, tail = rest.partition("/")
        if mount_path and head == mount_path.strip("/"):
            return Resolved("share", share_name, normalize(tail))
        mount = find(job_mounts, head)
        return Resolved("job", head, normalize(tail), mount) if mount is not None else None
    m = _CLUSTER_RE.match(path)
    if m:
        head, _, tail = (m.group(1) or "").lstrip("/").partition("/")
        if not head:
            return None
        if head == share_name:
            return Resolved("share", share_name, normalize(tail))
        return Resolved("cluster", head, normalize(tail), find(cluster_mounts, head))
    return None


def spec_strings(spec: JobSpec) -> Iterator[tuple[str, str]]:
    """(SDK field, string) for every string of the spec a node expands: where mounts may be named."""
    if spec.python_script:
        yield "python_script", spec.python_script
    for i, arg in enumerate(spec.args):
        yield f"args[{i}]", arg
    for name in ("command_line", "job_preparation", "std_out_err_path_prefix"):
        value = getattr(spec, name)
        if value:
            yield name, value
    for kind in ("input_directories", "output_directories"):
        for key, value in getattr(spec, kind).items():
            yield f"{kind}.{key}", value
    for key, value in spec.environment.items():
        if key not in spec.secret_environment:
            yield f"environment.{key}", value
    for key, value in spec.toolkit_settings.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, str):
                yield f"toolkit_settings.{key}", item


def cluster_mounts_named(spec: JobSpec, *, share_name: str) -> dict[str, str]:
    """``$AZ_BATCHAI_MOUNT_ROOT/<name>`` the job names (other than the workspace share): name → the first
    SDK field naming it."""
    named: dict[str, str] = {}
    for field_name, text in spec_strings(spec):
        for m in _CLUSTER_ANYWHERE.finditer(text):
            if m.group(1) != share_name:
                named.setdefault(m.group(1), field_name)
    return named
