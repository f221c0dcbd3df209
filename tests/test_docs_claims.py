"""What the pages claim holds: no page counts the backends (the count went stale twice: "three backends"
beside the README's four, with Azure Batch a fifth way to run), and every API a page names in code exists
and is public — a method renamed or an internal named in a doc fails here, not in a reader's hands."""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path

import pytest

import batchai_sdk
from batchai_sdk import Cluster, Experiment, Job, Share, Sweep, Workspace

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COUNTED = re.compile(
    r"\b(?:two|three|four|five|six|seven|\d+)\s+(?:different\s+)?back-?ends\b", re.IGNORECASE
)
# The names pages use for the SDK's objects, in code: `ws.create_cluster(...)`, `job.metrics()`, ...
RECEIVERS: dict[str, type] = {
    "ws.share": Share, "share": Share, "ws": Workspace, "workspace": Workspace, "Workspace": Workspace,
    "exp": Experiment, "experiment": Experiment, "Experiment": Experiment, "cluster": Cluster,
    "Cluster": Cluster, "job": Job, "Job": Job, "sweep": Sweep, "Sweep": Sweep,
}  # fmt: skip
NAMED = re.compile(
    r"(?<![\w.$/-])(" + "|".join(sorted(map(re.escape, RECEIVERS), key=len, reverse=True)) + r")\.(\w+)"
)
# file names that look like attributes: `job.json`, `cluster.py`, `job.sbatch`
FILE_SUFFIXES = {
    "json",
    "jsonl",
    "py",
    "yaml",
    "yml",
    "sbatch",
    "txt",
    "md",
    "h5",
    "csv",
    "png",
    "ipynb",
    "sh",
}
# public attributes that are the SDK's plumbing, not for users (the API reference leaves them out too)
INTERNAL = {
    Workspace: {"backend", "deferred_sizes", "from_registry_entry"},
    Job: {"paths", "dir_argument", "file_roots"},
    Experiment: {"job_from_spec"},
}
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^[ \t]*(```+|~~~+)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
IMPORT = re.compile(r"^\s*from (batchai_sdk[\w.]*) import \(?([^)\n]*(?:\n[^)\n]*)*?)\)?\s*$", re.M)


def code_of(text: str) -> list[tuple[int, str]]:
    """(line, code) of every fenced block and inline code span of a page."""
    out = [(text.count("\n", 0, m.start(2)) + 1, m.group(2)) for m in FENCE.finditer(text)]
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out += [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in INLINE.finditer(prose)]
    return out


@functools.cache
def attributes(cls: type) -> set[str]:
    """What an instance of ``cls`` has: its class's attributes and those its methods assign to self."""
    found = set(dir(cls))
    for klass in cls.__mro__:
        if klass.__module__.startswith("batchai_sdk"):
            found |= set(re.findall(r"self\.(\w+)\s*(?::[^=\n]+)?=", inspect.getsource(klass)))
    return found


def unknown_names(page: Path) -> list[str]:
    wrong = []
    for first, code in code_of(page.read_text(encoding="utf-8")):

        def at(start: int, first: int = first, code: str = code) -> int:
            return first + code.count("\n", 0, start)

        for m in NAMED.finditer(code):
            line = at(m.start())
            receiver, name = m.groups()
            if name in FILE_SUFFIXES:
                continue
            cls = RECEIVERS[receiver]
            if name.startswith("_") or name in INTERNAL.get(cls, set()):
                wrong.append(f"{page.name}:{line}: {receiver}.{name} is internal")
            elif name not in attributes(cls):
                wrong.append(f"{page.name}:{line}: {receiver}.{name} does not exist ({cls.__name__})")
        for m in IMPORT.finditer(code):
            line = at(m.start(2))
            module = importlib.import_module(m.group(1))
            for name in re.split(r"[\s,]+", re.sub(r"#[^\n]*", "", m.group(2))):
                bare = name.split(" as ")[0]
                if bare and bare != "..." and not hasattr(module, bare):
                    wrong.append(f"{page.name}:{line}: from {m.group(1)} import {bare}: no such name")
        for m in re.finditer(r"(?<![\w.])batchai_sdk\.([A-Z]\w*)\b", code):
            line = at(m.start())
            if not hasattr(batchai_sdk, m.group(1)):
                wrong.append(f"{page.name}:{line}: batchai_sdk.{m.group(1)} does not exist")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_counts_the_backends(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    counted = [
        f"{page.name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in COUNTED.finditer(text)
    ]
    assert not counted, "name the backends, not how many there are:\n" + "\n".join(counted)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_api_a_page_names_exists_and_is_public(page: Path) -> None:
    wrong = unknown_names(page)
    assert not wrong, "\n".join(wrong)


def test_the_check_itself_catches_a_stale_name(tmp_path: Path) -> None:
    page = tmp_path / "stale.md"
    page.write_text(
        "Three backends: `ws.create_cluster(...)` and `job.no_such_method()`; `ws.backend.kind`.\n\n"
        "```python\nfrom batchai_sdk import Workspace, NoSuchThing\nbatchai_sdk.Gone\n```\n"
    )
    assert unknown_names(page) == [
        "stale.md:4: from batchai_sdk import NoSuchThing: no such name",
        "stale.md:5: batchai_sdk.Gone does not exist",
        "stale.md:1: job.no_such_method does not exist (Job)",
        "stale.md:1: ws.backend is internal",
    ]
    assert COUNTED.search(page.read_text())


def test_the_site_is_in_sections_a_newcomer_can_navigate() -> None:
    """Start, the guides by task, the backends, the reference: not a flat list of pages."""
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = yaml.load(text, Loader=yaml.BaseLoader)["nav"]  # BaseLoader: mkdocs' !!python tags unread
    sections = {title: [next(iter(page)) for page in pages] for item in nav for title, pages in item.items()}
    assert list(sections) == ["Start", "Guides", "Backends", "Reference"]
    assert sections["Guides"][:3] == ["Your own script", "Metrics and sweeps", "Surviving failures"]
    assert sections["Backends"] == ["SSH clusters", "Slurm clusters", "Azure"]
    assert "API" in sections["Reference"]
