"""A job's processes as the node code sees them, for the node tests (tests/node/): ``Procs`` starts them with
a job tag (the ``procs`` fixture of tests/node/conftest.py ends them), ``HUNG_RANK`` is a Python rank stuck
in a loop, and ``as_on_a_node`` runs code with the node package copied alone as ``batchai_node``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from batchai_sdk.node.job import stacks

HUNG_RANK = textwrap.dedent(
    """
    import faulthandler, signal, sys, time
    if sys.argv[1] == "faulthandler":
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    def stuck_in_allreduce():
        while True:
            time.sleep(0.05)
    print("ready", flush=True)
    stuck_in_allreduce()
    """
)


@dataclass
class Procs:
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, argv: list[str], tag: str | None, stderr: Path | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != stacks.JOB_TAG_VARIABLE}
        if tag is not None:
            env[stacks.JOB_TAG_VARIABLE] = tag
        err = stderr.open("wb") if stderr else subprocess.DEVNULL
        # SIGINT back to its default: a shell's background job inherits it ignored, and Python then installs
        # no KeyboardInterrupt handler, which the caught-mask test reads
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.started.append(proc)
        return proc

    def python_rank(self, tag: str | None, mode: str, stderr: Path | None = None) -> subprocess.Popen[bytes]:
        proc = self.start([sys.executable, "-c", HUNG_RANK, mode], tag, stderr)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # faulthandler is registered by now
        return proc


def as_on_a_node(tmp_path: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the node package copied alone as ``batchai_node`` (batchai_sdk unimportable)."""
    package = tmp_path / "share" / "batchai_node"
    if not package.exists():
        shutil.copytree(
            Path(stacks.__file__).parent.parent, package, ignore=shutil.ignore_patterns("__pycache__")
        )
    prelude = f"import sys; sys.path.insert(0, {str(package.parent)!r}); sys.modules['batchai_sdk'] = None; "
    return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code, *args], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
