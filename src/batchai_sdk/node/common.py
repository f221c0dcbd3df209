"""Small helpers every node-side module shares (standard library only)."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # ctl loads this module: the type only where it is checked
    from .protocol.launch import LaunchConfig

TAG_VAR = "BATCHAI_JOB_TAG"  # every process of a job carries it; procs.py finds them by it


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def load(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_or_none(path: str) -> Any:
    try:
        return load(path)
    except (OSError, ValueError):
        return None


def write_json_atomic(path: str, data: Any, *, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` whole with ``data`` as JSON (readers never see half a record)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=mode, sync=sync)


def write_text_atomic(path: str, text: str, *, mode: int = 0o644, sync: bool = True) -> None:
    """Replace ``path`` whole (readers never see half a file); the temp file is removed on failure.
    ``sync=False`` skips the fsync, for scratch files nothing needs after a crash."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{now()} {line}\n")


def try_append(path: str, line: str) -> bool:
    """``append`` that tolerates a full or read-only share (logging must never end a job)."""
    try:
        append(path, line)
    except OSError:
        return False
    return True


_VAR_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(value: str, env: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` from ``env``; an unset name gives an empty string, as a shell (and Batch
    AI, which ran arguments through one) gave it. A ``$`` not followed by a name stays as written."""
    return _VAR_RE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)


def job_env(cfg: LaunchConfig, secrets: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of job preparation and ranks: ours + the job's + its secrets, values expanded."""
    env = dict(os.environ)
    env.update(cfg["env"])
    venv = (cfg.get("requirements") or {}).get("venv")
    if venv:  # the job's own venv (source_dir's requirements): `python` in a command line is its
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", os.defpath)
        env["VIRTUAL_ENV"] = venv
    if secrets:
        env.update(secrets)
    for key in cfg.get("expand_env", []):
        if key in env:
            env[key] = expand(env[key], env)
    return env


def script_python(cfg: LaunchConfig) -> str:
    """The interpreter of the job's script: its venv's when source_dir had requirements, else the job's."""
    venv = (cfg.get("requirements") or {}).get("venv")
    return os.path.join(venv, "bin", "python") if venv else str(cfg["python"])


def read_tail(path: str, size: int = 65536) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def hostfile_text(nodes: list[dict[str, Any]], ranks: list[int]) -> str:
    """``address slots=N`` per run of nodes on one address; ranks fill lines in order (-map-by slot)."""
    lines: list[list[Any]] = []
    for node, count in zip(nodes, ranks, strict=True):
        if count <= 0:
            continue
        if lines and lines[-1][0] == node["address"]:
            lines[-1][1] += count
        else:
            lines.append([node["address"], count])
    return "".join(f"{addr} slots={n}\n" for addr, n in lines)


def rank_node_ids(nodes: list[dict[str, Any]], ranks: list[int]) -> list[str]:
    out: list[str] = []
    for node, count in zip(nodes, ranks, strict=True):
        out.extend([node["id"]] * count)
    return out
