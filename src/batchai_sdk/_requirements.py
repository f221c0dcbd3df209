"""A job's Python requirements: ``requirements.txt`` (else ``pyproject.toml``'s ``[project] dependencies``)
in its ``source_dir``, found at submit and installed by the job's preparation on each node into a venv of
its own (``node/job/requirements.py``: ``--system-site-packages``, cached by hash on the node) — or refused
at submit with the reason and the switch (``install_requirements=False``), never silently ignored."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .exceptions import ValidationError

if TYPE_CHECKING:
    from ._models import JobSpec

REQUIREMENTS_FILE = "requirements.txt"
PYPROJECT = "pyproject.toml"
SWITCH = "install_requirements=False (CLI: --no-install-requirements)"


@dataclass(frozen=True)
class Requirements:
    """What ``source_dir`` asks to install: the file (its path in the folder and text) or the lines."""

    source: str  # "requirements.txt" or "pyproject.toml"
    text: str  # what the hash covers
    file: str | None = None  # the file to `pip install -r`, relative to source_dir
    lines: tuple[str, ...] = ()

    def node_config(self, base_python: str, temp_root: str, wd_on_node: str) -> dict[str, Any]:
        """``launch.json``'s ``requirements``: the node's interpreter, what to install, the cached venv."""
        digest = hashlib.sha256(f"{base_python}\0{self.text}".encode()).hexdigest()[:16]
        return {
            "base": base_python,
            "file": posixpath.join(wd_on_node, self.file) if self.file else None,
            "lines": list(self.lines),
            "venv": posixpath.join(temp_root, "venvs", digest),
            "hash": digest,
            "source": self.source,
        }


def find_requirements(spec: JobSpec) -> Requirements | None:
    """The requirements of the job's ``source_dir`` (None without a source_dir, or when it declares
    none)."""
    if spec.source_dir is None:
        return None
    root = Path(spec.source_dir).expanduser()
    req = root / REQUIREMENTS_FILE
    if req.is_file():
        return Requirements(REQUIREMENTS_FILE, req.read_text(encoding="utf-8"), file=REQUIREMENTS_FILE)
    pyproject = root / PYPROJECT
    if not pyproject.is_file():
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ValidationError(
            "source_dir",
            spec.source_dir,
            f"a {PYPROJECT} this Python can read (3.11+), or a {REQUIREMENTS_FILE}, or {SWITCH}",
        ) from None
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"source_dir/{PYPROJECT}", str(pyproject), f"valid TOML ({exc})") from None
    deps = (data.get("project") or {}).get("dependencies") or []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ValidationError(f"{PYPROJECT} [project] dependencies", deps, "a list of requirement strings")
    if not deps:
        return None
    return Requirements(PYPROJECT, "\n".join(deps), lines=tuple(deps))


def check_requirements(spec: JobSpec, backend_installs: bool, backend: str) -> Requirements | None:
    """The requirements the job's preparation installs; a ``ValidationError`` naming the file, why it
    cannot be installed here and the switch, when they cannot be."""
    found = find_requirements(spec)
    if found is None or not spec.install_requirements:
        return None
    why = None
    if spec.container_image:
        why = "a container job installs nothing on its nodes: put them in the image"
    elif not backend_installs:
        why = f"the {backend} backend's nodes do not install them: put them in the cluster's node setup"
    if why:
        raise ValidationError(
            "install_requirements",
            f"{spec.source_dir}/{found.source}",
            f"{why}, then pass {SWITCH} to say they are there",
        )
    return found
