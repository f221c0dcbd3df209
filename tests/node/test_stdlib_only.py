"""The node package runs with the nodes' own Python: every module imports with the standard library alone."""

from __future__ import annotations

from pathlib import Path

from _node_procs import as_on_a_node
from batchai_sdk.node.job import stacks


def test_node_modules_import_only_the_standard_library(tmp_path: Path) -> None:
    # every module of the node package, subfolders included, imports as ``batchai_node`` with python -S
    root = Path(stacks.__file__).parent.parent
    modules = sorted(
        ".".join(("batchai_node", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for p in root.rglob("*.py")
        if p.name != "__main__.py"
    )
    assert len(modules) > 25 and "batchai_node.scheduler.daemon" in modules
    done = as_on_a_node(
        tmp_path, "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]", *modules
    )
    assert done.returncode == 0, done.stderr
