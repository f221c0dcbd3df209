"""A pure-Python wheel made by hand and a project folder that requires it offline (``--no-index
--find-links wheels``): what the requirements tests install, with no network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

# Imports the wheel's module and the SDK (the node interpreter's own packages stay visible in the venv).
TRAIN = """\
import sys
import tinypkg
import batchai_sdk
print("tinypkg", tinypkg.VALUE, "prefix", sys.prefix)
"""


def tiny_wheel(folder: Path, version: str = "1.0") -> Path:
    """A pure-Python wheel of one module, ``tinypkg`` (``VALUE = 42``), as pip builds them."""
    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        f"tinypkg-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n",
        f"tinypkg-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append(f"tinypkg-{version}.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tinypkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"tinypkg-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def tiny_project(proj: Path) -> Path:
    """``proj/``: train.py, wheels/tinypkg-1.0-py3-none-any.whl and a requirements.txt naming it offline."""
    proj.mkdir(parents=True)
    (proj / "train.py").write_text(TRAIN)
    tiny_wheel(proj / "wheels")
    (proj / "requirements.txt").write_text("--no-index\n--find-links wheels\ntinypkg==1.0\n")
    return proj
