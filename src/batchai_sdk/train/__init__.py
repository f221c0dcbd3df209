"""Training scripts that the SDK uploads to a share and runs on the cluster nodes.

Each script is one self-contained file (stdlib, numpy, TensorFlow, Horovod, optionally scikit-learn): the
nodes run it as ``python <script>.py ...`` without batchai_sdk installed. Importing this package does not
import TensorFlow.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["module_path"]

_HERE = Path(__file__).resolve().parent


def module_path(name: str = "cifar10") -> Path:
    """Return the path of the training script ``name`` (e.g. ``"cifar10"``) to upload as ``python_script``."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"not a training script name: {name!r}")
    path = _HERE / f"{name}.py"
    if not path.is_file():
        available = sorted(p.stem for p in _HERE.glob("*.py") if not p.stem.startswith("_"))
        raise ValueError(f"no training script named {name!r}; available: {', '.join(available)}")
    return path
