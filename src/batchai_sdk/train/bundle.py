"""One file to upload: a training script with the ``batchai_sdk.train`` modules it imports inlined.

The training code lives in small modules (``datasets.py``, ``checkpoints.py``, ...) that import each other
package-relatively; the nodes run a single file without batchai_sdk installed. ``bundle_source("cifar10")``
joins ``cifar10.py`` and the sibling modules it imports, dependencies first, into one script: their
``from .x import ...`` lines and repeated ``from __future__`` imports dropped, the script's docstring on top
and its ``if __name__ == "__main__":`` at the end. The supported imports between siblings are top-level
``from .module import name`` without ``as`` (the inlined names must keep their own names); a name defined
in two inlined modules, an import cycle or anything else is a ``BundleError``, never a broken file.

``bundled_script(name)`` writes the bundle once into a cache folder named after a hash of this package's
sources (``$XDG_CACHE_HOME/batchai_sdk/train/<hash>/<name>.py``, else ``~/.cache/...``, else the temporary
folder), atomically, and returns its path; ``batchai_sdk.train.module_path`` returns that. A bundle's folder
is touched on each use; writing a new one removes those unused for ``CACHE_DAYS`` (older versions' bundles).

As a command: ``python -m batchai_sdk.train.bundle cifar10 cifar_cnn_distributed.py`` (``-`` for stdout).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SCRIPTS",
    "BundleError",
    "bundle_source",
    "bundled_script",
    "cache_roots",
    "dependency_order",
    "main",
    "prune_cache",
    "write_atomically",
]

SCRIPTS = ("cifar10", "cifar10_torch")
"""The training scripts a job can run; the other modules here are their parts."""

PACKAGE_DIR = Path(__file__).resolve().parent
_KEY_LENGTH = 16
CACHE_DAYS = 30.0  # a bundle folder unused this long goes when a new bundle is written


class BundleError(Exception):
    """The modules cannot be joined into one correct file (an unsupported import, a clash, a cycle)."""


@dataclass(frozen=True)
class _Module:
    """One parsed module: its lines, what to drop from them, what it needs."""

    name: str
    lines: tuple[str, ...]
    docstring: str | None  # its source text
    dropped: frozenset[int]  # 0-based line numbers: docstring, __future__ and sibling imports
    futures: frozenset[str]
    deps: tuple[str, ...]  # sibling modules, in import order
    defined: frozenset[str]  # names its own top-level code binds (not imports)
    imports: tuple[tuple[tuple[int, ...], frozenset[tuple[str, str]]], ...]  # (lines, {(name, what)})
    has_main_guard: bool


def _span(node: ast.stmt) -> range:
    return range(node.lineno - 1, (node.end_lineno or node.lineno))


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (definitions and assignments; imports apart)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    names: set[str] = set()
    for target in targets:
        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _import_bindings(node: ast.Import | ast.ImportFrom) -> set[tuple[str, str]]:
    """(name bound, what it is) of an absolute import: ``import a.b`` binds a, ``from a import b as c`` c."""
    if isinstance(node, ast.Import):
        top = [alias.name.split(".")[0] for alias in node.names]
        return {(a.asname, a.name) if a.asname else (t, t) for a, t in zip(node.names, top, strict=True)}
    return {(alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names}


def _is_main_guard(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _parse(folder: Path, name: str) -> _Module:
    path = folder / f"{name}.py"
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror or exc}") from exc
    tree = ast.parse(source, filename=str(path))
    top_level = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and id(node) not in top_level:
            raise BundleError(f"{path.name}:{node.lineno}: a relative import must be at the top level")
    dropped: set[int] = set()
    futures: set[str] = set()
    deps: list[str] = []
    defined: set[str] = set()
    imports: list[tuple[tuple[int, ...], frozenset[tuple[str, str]]]] = []
    docstring = None
    if ast.get_docstring(tree, clean=False) is not None:  # kept as written: quotes, escapes and all
        docstring = "\n".join(source.splitlines()[i] for i in _span(tree.body[0]))
        dropped.update(_span(tree.body[0]))
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            futures.update(alias.name for alias in node.names)
            dropped.update(_span(node))
        elif isinstance(node, ast.ImportFrom) and node.level:
            if node.level != 1 or not node.module or "." in node.module:
                raise BundleError(f"{path.name}:{node.lineno}: only 'from .module import name' is supported")
            if any(alias.asname not in (None, alias.name) or alias.name == "*" for alias in node.names):
                raise BundleError(f"{path.name}:{node.lineno}: no 'as' or '*' between modules")
            if node.module not in deps:
                deps.append(node.module)
            dropped.update(_span(node))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imports.append((tuple(_span(node)), frozenset(_import_bindings(node))))
        else:
            defined.update(_bound_names(node))
    return _Module(
        name=name,
        lines=tuple(source.splitlines()),
        docstring=docstring,
        dropped=frozenset(dropped),
        futures=frozenset(futures),
        deps=tuple(deps),
        defined=frozenset(defined),
        imports=tuple(imports),
        has_main_guard=any(_is_main_guard(node) for node in tree.body),
    )


def _load(folder: Path, name: str) -> list[_Module]:
    """``name`` and every sibling it imports, dependencies before the modules that import them."""
    order: list[_Module] = []
    done: set[str] = set()
    visiting: list[str] = []

    def visit(module_name: str) -> None:
        if module_name in done:
            return
        if module_name in visiting:
            cycle = [*visiting[visiting.index(module_name) :], module_name]
            raise BundleError(f"import cycle: {' -> '.join(cycle)}")
        visiting.append(module_name)
        module = _parse(folder, module_name)
        for dep in module.deps:
            visit(dep)
        visiting.pop()
        done.add(module_name)
        order.append(module)

    visit(name)
    return order


def dependency_order(name: str, folder: Path = PACKAGE_DIR) -> list[str]:
    """The modules the bundle of ``name`` holds, in the order it holds them (``name`` last)."""
    return [module.name for module in _load(folder, name)]


def _check_names(modules: list[_Module]) -> set[tuple[str, int]]:
    """Raise BundleError on a name two modules bind differently; return the ids of import statements that
    only repeat bindings an earlier module made (dropped from the bundle)."""
    owner: dict[str, str] = {}
    for module in modules:
        for name in module.defined:
            if name in owner:
                raise BundleError(f"{name!r} is defined in both {owner[name]}.py and {module.name}.py")
            owner[name] = module.name
    bound: dict[str, tuple[str, str]] = {}  # name -> (what, module)
    repeated: set[tuple[str, int]] = set()
    for module in modules:
        for lines, bindings in module.imports:
            for name, what in bindings:
                if name in owner:
                    raise BundleError(f"{module.name}.py imports {name!r}, which {owner[name]}.py defines")
                earlier = bound.setdefault(name, (what, module.name))
                if earlier[0] != what:
                    raise BundleError(
                        f"{name!r} is {earlier[0]} in {earlier[1]}.py but {what} in {module.name}.py"
                    )
            if all(bound[name][1] != module.name for name, _ in bindings):
                repeated.add((module.name, lines[0]))
    return repeated


def _body(module: _Module, repeated: set[tuple[str, int]]) -> str:
    dropped = set(module.dropped)
    for lines, _ in module.imports:
        if (module.name, lines[0]) in repeated:
            dropped.update(lines)
    kept = [line for i, line in enumerate(module.lines) if i not in dropped]
    return "\n".join(kept).strip("\n")


def bundle_source(name: str, folder: Path = PACKAGE_DIR) -> str:
    """The single-file script: ``name``.py with the sibling modules it imports inlined before it."""
    modules = _load(folder, name)
    *parts, script = modules
    for module in parts:
        if module.has_main_guard:
            raise BundleError(f"{module.name}.py has an 'if __name__ == \"__main__\"' block of its own")
    repeated = _check_names(modules)
    out: list[str] = []
    if script.docstring is not None:
        out.append(script.docstring)
    parts_list = ", ".join(f"{m.name}.py" for m in parts) or "none"
    out.append(
        f"# Generated by batchai_sdk.train.bundle from {name}.py and the modules it imports ({parts_list}).\n"
        f"# Edit those and regenerate it: python -m batchai_sdk.train.bundle {name} OUT.py"
    )
    futures = sorted(set().union(*(m.futures for m in modules)))
    if futures:
        out.append(f"from __future__ import {', '.join(futures)}")
    for module in modules:
        out.append(f"# {'-' * 40} {module.name}.py\n\n{_body(module, repeated)}")
    text = "\n\n\n".join(out) + "\n"
    _verify(text, name)
    return text


def _verify(text: str, name: str) -> None:
    """The bundle parses, compiles and has no relative import left."""
    try:
        tree = ast.parse(text, filename=f"{name}.py")
        compile(tree, f"{name}.py", "exec")
    except SyntaxError as exc:
        raise BundleError(f"the bundle of {name} does not compile: {exc}") from exc
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise BundleError(f"the bundle of {name} still has a relative import at line {node.lineno}")


def _sources_key(name: str, folder: Path) -> str:
    """A hash of every module in ``folder`` (the bundler included) and the script's name."""
    digest = hashlib.sha256(name.encode())
    for path in sorted(folder.glob("*.py")):
        digest.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:_KEY_LENGTH]


def cache_roots() -> list[Path]:
    """Where bundles are cached, in order of preference (``$XDG_CACHE_HOME`` when it is absolute)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return [base / "batchai_sdk" / "train", Path(tempfile.gettempdir()) / f"batchai_sdk-{user}" / "train"]


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary name beside ``path`` and rename it: readers see all of it or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def prune_cache(root: Path, keep: str, days: float = CACHE_DAYS) -> None:
    """Remove the bundle folders under ``root`` unused for ``days`` (never ``keep``). Age, not version,
    decides: another installed version of the SDK may still be using its own bundles."""
    limit = time.time() - days * 86400
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            with contextlib.suppress(OSError):
                old = entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < limit
                if old and entry.name != keep:
                    shutil.rmtree(entry, ignore_errors=True)


def bundled_script(name: str, folder: Path = PACKAGE_DIR) -> Path:
    """The cached single-file bundle of ``name`` (written on first use, found afterwards)."""
    key = _sources_key(name, folder)
    text: str | None = None
    failures: list[str] = []
    for root in cache_roots():
        path = root / key / f"{name}.py"
        if path.is_file():
            with contextlib.suppress(OSError):
                os.utime(path.parent)  # in use: not pruned (the file itself keeps its time)
            return path
        text = text if text is not None else bundle_source(name, folder)
        try:
            write_atomically(path, text)
        except OSError as exc:
            failures.append(f"{path.parent}: {exc.strerror or exc}")
            continue
        prune_cache(root, keep=key)
        return path
    raise OSError(f"cannot write the bundle of {name}: {'; '.join(failures)}")


def main(argv: list[str] | None = None) -> int:
    """``python -m batchai_sdk.train.bundle NAME [OUT]``: write the single-file script NAME to OUT."""
    parser = argparse.ArgumentParser(
        prog="python -m batchai_sdk.train.bundle",
        description="Write a training script as the one file the nodes run (no batchai_sdk needed there).",
    )
    parser.add_argument("name", choices=SCRIPTS, help="the training script")
    parser.add_argument(
        "out", nargs="?", default=None, help="file to write (default: NAME.py here; '-': standard output)"
    )
    args = parser.parse_args(argv)
    text = bundle_source(args.name)
    if args.out == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.out or f"{args.name}.py")
    try:
        write_atomically(out, text)
    except OSError as exc:
        print(f"error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
