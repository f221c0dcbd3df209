"""Where a job's ranks run in a container (``containerSettings``): the engine, the image's full name and
its pull, once per machine before the ranks start.

An image without a registry is Docker Hub's, as Batch AI read it: ``tensorflow/tensorflow:1.8.0-gpu`` is
``docker.io/tensorflow/tensorflow:1.8.0-gpu`` and ``ubuntu`` is ``docker.io/library/ubuntu``. Podman
refuses such short names outside a terminal ("short-name did not resolve to an alias"), so both engines
are given the full name.
"""

from __future__ import annotations

import os
import shutil
import subprocess

ENGINES = ("docker", "podman")
DEFAULT_REGISTRY = "docker.io"
PULL_FAILED = 86  # the exit code of ``prep`` when the image could not be pulled (its reason on stderr)
PULL_FAILED_PREFIX = "could not pull image "


class PullError(Exception):
    """The engine could not pull the job's image; ``str()`` is the job's failure reason."""


def qualify_image(image: str) -> str:
    """The image's full name: Docker Hub's registry (and its ``library/`` for official images) added to a
    short name. A name whose first component has a '.' or ':' or is ``localhost`` names its registry
    already and is kept, as is its tag or digest."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return image
    if not sep:
        return f"{DEFAULT_REGISTRY}/library/{image}"
    return f"{DEFAULT_REGISTRY}/{image}"


def find_engine(path: str | None = None) -> str | None:
    """The path of docker or podman, looked up on ``path`` (default: this process's PATH), whose engine
    answers ``info`` (a client alone is not enough)."""
    for tool in ENGINES:
        found = shutil.which(tool, path=path)
        if not found:
            continue
        try:
            ok = subprocess.run([found, "info"], capture_output=True, timeout=20, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return found
    return None


def engine_name(engine: str) -> str:
    return os.path.basename(engine)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def pull(engine: str, image: str, env: dict[str, str], *, timeout: float | None = None) -> None:
    """``<engine> pull <image>``; raises ``PullError`` naming the image, the engine's last line of
    stderr (or stdout) and the engine."""
    try:
        done = subprocess.run(
            [engine, "pull", image], capture_output=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        why = f"no answer in {timeout:.0f} s"
    except OSError as exc:
        why = str(exc)
    else:
        if done.returncode == 0:
            return
        why = (
            last_line(done.stderr.decode(errors="replace"))
            or last_line(done.stdout.decode(errors="replace"))
            or f"exit code {done.returncode}"
        )
    raise PullError(f"{PULL_FAILED_PREFIX}{image}: {why} (engine: {engine_name(engine)})")
