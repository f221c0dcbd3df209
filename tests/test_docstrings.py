"""Every public member of the public API (what ``batchai_sdk`` exports, and the public methods and
properties of those classes, inherited ones from our own bases included) has a docstring: the API
reference (docs/api.md, rendered by mkdocstrings) and ``help()`` show it."""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Iterator

import batchai_sdk


def _own_bases(cls: type) -> list[type]:
    return [c for c in cls.__mro__ if c.__module__.startswith("batchai_sdk")]


def _has_doc(obj: object) -> bool:
    doc = (obj.__doc__ or "").strip()
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        # a dataclass without a docstring gets its signature as __doc__
        return bool(doc) and not doc.startswith(f"{obj.__name__}(")
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return bool(doc) and doc != "An enumeration."
    return bool(doc) and "__doc__" in vars(obj) if inspect.isclass(obj) else bool(doc)


def public_api() -> Iterator[tuple[str, object]]:
    """(dotted name, object) of every exported name and of every public method and property of an
    exported class."""
    for name in batchai_sdk.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(batchai_sdk, name)
        yield name, obj
        if not inspect.isclass(obj) or issubclass(obj, enum.Enum):
            continue
        seen: set[str] = set()
        for cls in _own_bases(obj):
            for member, attr in vars(cls).items():
                if member.startswith("_") or member in seen:
                    continue
                seen.add(member)
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, property):
                    yield f"{name}.{member}", attr.fget
                elif inspect.isfunction(attr):
                    yield f"{name}.{member}", attr


def test_the_walk_covers_the_api() -> None:
    names = {name for name, _ in public_api()}
    for expected in (
        "Workspace.create_experiment",
        "Workspace.create_cluster",
        "Experiment.get_job",
        "Job.plot_metrics",
        "Job.state",
        "Cluster.resize",
        "Share.read_text",
        "NotFoundError",
        "JobSpec.from_dict",
    ):
        assert expected in names
    assert len(names) > 130


def test_every_public_member_has_a_docstring() -> None:
    missing = [name for name, obj in public_api() if not _has_doc(obj)]
    assert not missing, f"{len(missing)} public members without a docstring: {', '.join(missing)}"
