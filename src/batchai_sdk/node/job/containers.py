"""Where a job's ranks run in a container (``containerSettings``): the engine, the image's full name and
its pull, once per machine before the ranks start.

An image without a registry is Docker Hub's, as Batch AI read it: ``tensorflow/tensorflow:1.8.0-gpu`` is
``docker.io/tensorflow/tensorflow:1.8.0-gpu`` and ``ubuntu`` is ``docker.io/library/ubuntu``. Podman
refuses such short names outside a terminal ("short-name did not resolve to an alias"), so both engines
are given the full name.

A pull that does not finish in ``PULL_TIMEOUT`` seconds (the job's ``BATCHAI_PULL_TIMEOUT`` variable
overrides it) fails the job rather than holding its nodes in preparation for ever.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

ENGINES = ("docker", "podman")
DEFAULT_REGISTRY = "docker.io"
PULL_FAILED = 86  # the exit code of ``prep`` when the image could not be pulled (its reason on stderr)
PULL_FAILED_PREFIX = "could not pull image "
PULL_TIMEOUT = 1800.0  # seconds: a large CUDA image over a slow registry link, with room to spare
PULL_TIMEOUT_VARIABLE = "BATCHAI_PULL_TIMEOUT"


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


def pull_timeout(env: dict[str, str]) -> float:
    """The job's ``BATCHAI_PULL_TIMEOUT`` in seconds when it is a positive number, else ``PULL_TIMEOUT``."""
    try:
        seconds = float(env.get(PULL_TIMEOUT_VARIABLE, ""))
    except ValueError:
        return PULL_TIMEOUT
    return seconds if seconds > 0 else PULL_TIMEOUT


def pull(engine: str, image: str, env: dict[str, str], *, timeout: float | None = None) -> None:
    """``<engine> pull <image>``; raises ``PullError`` naming the image, the engine's last line of
    stderr (or stdout) and the engine. Past ``timeout`` the engine and its children are killed."""
    try:
        proc = subprocess.Popen(
            [engine, "pull", image],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own group: a timeout kills the helpers it started too
        )
    except OSError as exc:
        raise PullError(f"{PULL_FAILED_PREFIX}{image}: {exc} (engine: {engine_name(engine)})") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        longer = f"set {PULL_TIMEOUT_VARIABLE} in the job's environment for longer"
        why = f"no answer in {timeout:.0f} s ({longer})"
    else:
        if proc.returncode == 0:
            return
        why = (
            last_line(err.decode(errors="replace"))
            or last_line(out.decode(errors="replace"))
            or f"exit code {proc.returncode}"
        )
    raise PullError(f"{PULL_FAILED_PREFIX}{image}: {why} (engine: {engine_name(engine)})")
