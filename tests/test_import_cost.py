"""``import batchai_sdk`` stays light (issue #22: <= 60 ms, figure in benchmarks/bench_queue.py): the
modules only some calls need load on first use, and every public name still imports."""

from __future__ import annotations

import json
import subprocess
import sys

# Each loads on first use (submit, a price, a job's JSON, a notebook repr, a write), not at import.
DEFERRED = (
    "batchai_sdk.batchai_json",
    "batchai_sdk._staging",
    "batchai_sdk._submit",
    "batchai_sdk._registry",
    "batchai_sdk.backends.head_scheduler",
    "batchai_sdk.launch",
    "batchai_sdk.pricing",
    "batchai_sdk.vm_sizes",
    "concurrent.futures",
    "hashlib",
    "html",
    "secrets",
    "shutil",
    "statistics",
    "subprocess",
    "tempfile",
    "uuid",
)


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_import_loads_none_of_the_deferred_modules() -> None:
    loaded = json.loads(_python("import json, sys, batchai_sdk; print(json.dumps(sorted(sys.modules)))"))
    assert [m for m in DEFERRED if m in loaded] == []


def test_public_names_and_the_launch_target_re_export_still_import() -> None:
    out = _python(
        "import batchai_sdk\n"
        "missing = [n for n in batchai_sdk.__all__ if not hasattr(batchai_sdk, n)]\n"
        "from batchai_sdk.backends import LaunchTarget\n"
        "from batchai_sdk.backends.base import LaunchTarget as again\n"
        "from batchai_sdk.launch import LaunchTarget as original\n"
        "print(missing, LaunchTarget is again is original)\n"
        "import batchai_sdk.backends.base as base\n"
        "try:\n"
        "    base.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    assert out.splitlines() == [
        "[] True",
        "module 'batchai_sdk.backends.base' has no attribute 'NoSuchName'",
    ]
