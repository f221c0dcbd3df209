"""A job's Python requirements, installed on a node by its preparation (standard library only).

The client found ``requirements.txt`` (or ``pyproject.toml``'s ``[project] dependencies``) in the job's
``source_dir`` and wrote ``cfg["requirements"]``: the node's interpreter (``base``), the requirement file
staged with the code (``file``, installed with ``pip install -r`` in the job's working folder, so its
relative paths and ``--find-links ./wheels`` mean what they meant on the client) or the requirement lines
(``lines``), and the venv (``venv``: ``<temp root>/venvs/<hash of base + requirements>``).

The venv is made with ``--system-site-packages`` and sees every package of the node's interpreter, even
when that interpreter is itself a venv (a ``.pth`` adds its site folders): a requirement already there is
not installed again. It is cached by its hash: the next job with the same requirements on the node reuses
it. Built under an exclusive lock on the node (two jobs with the same requirements build it once; a
killed builder's lock goes with its process), finished with a ``.ready`` file last, so a half-built venv is
never used: the next job removes it and builds again. pip runs from the node's interpreter with
``--python`` aimed at the venv (pip >= 22.3), so the venv itself needs no pip.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from typing import Any

READY = ".ready"
SITE_DIRS = "import site, sys; print('\\n'.join([*site.getsitepackages(), site.getusersitepackages()]))"


def venv_python(venv: str) -> str:
    return os.path.join(venv, "bin", "python")


def ensure(req: dict[str, Any], cwd: str, env: dict[str, str], out: Any, err: Any) -> int:
    """Make (or reuse) the job's venv; 0 when it is ready, else the failing step's exit code (what failed
    is in ``err``)."""
    venv = req["venv"]
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when this process ends, however it ends
        if os.path.exists(os.path.join(venv, READY)):
            out.write(f"requirements: reusing {venv}\n".encode())
            return 0
        shutil.rmtree(venv, ignore_errors=True)  # a build that did not finish
        base = req["base"]
        steps = [
            [base, "-m", "venv", "--system-site-packages", "--without-pip", venv],
            [base, "-m", "pip", "--python", venv_python(venv), "install", "--disable-pip-version-check"]
            + (["-r", req["file"]] if req.get("file") else list(req.get("lines") or [])),
        ]
        for i, argv in enumerate(steps):
            out.write(f"requirements: {' '.join(argv)}\n".encode())
            out.flush()
            code = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=err, check=False).returncode
            if code != 0:
                err.write(f"requirements: {argv[2]} failed with exit code {code}\n".encode())
                return code or 1
            if i == 0:
                _inherit_site(base, venv, env, err)
        with open(os.path.join(venv, READY), "w", encoding="utf-8") as ready:
            ready.write(req.get("hash", ""))
    return 0


def _inherit_site(base: str, venv: str, env: dict[str, str], err: Any) -> None:
    """Have the venv see the node interpreter's own site folders (a venv's, when the node runs one), after
    its own: ``--system-site-packages`` alone reaches only the system's."""
    found = subprocess.run([base, "-c", SITE_DIRS], env=env, capture_output=True, text=True, check=False)
    dirs = [d for d in found.stdout.splitlines() if d and os.path.isdir(d)]
    probe = [venv_python(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    own = subprocess.run(probe, env=env, capture_output=True, text=True, check=False).stdout.strip()
    if not own:
        err.write(b"requirements: could not find the venv's site-packages\n")
        return
    os.makedirs(own, exist_ok=True)
    others = [d for d in dirs if os.path.realpath(d) != os.path.realpath(own)]
    with open(os.path.join(own, "_batchai_node_site.pth"), "w", encoding="utf-8") as pth:
        # an `import` line runs: addsitedir also reads those folders' own .pth files (editable installs)
        pth.write(f"import site; list(map(site.addsitedir, {others!r}))\n")
