"""Training scripts that the SDK uploads to a share and runs on the cluster nodes.

``cifar10`` (TensorFlow 2.15 + Horovod, the Batch AI tutorial's ``cifar_cnn_distributed.py``) and
``cifar10_torch`` (PyTorch DDP) are built from small modules here that import each other: ``datasets``
(CIFAR-10 files, digits), ``checkpoints`` (checkpoint files, metrics, restarts), ``cli_args`` (the common
options), ``errors``, and for Keras ``tf_data`` (input pipelines) and ``keras_callbacks``. Run them as
``python -m batchai_sdk.train.cifar10 ...``. The nodes run one file without batchai_sdk installed:
``module_path(name)`` returns that file, the script with the modules it imports inlined by ``bundle``
(stdlib, numpy, TensorFlow, Horovod or PyTorch, optionally scikit-learn), written once to a cache folder.
``python -m batchai_sdk.train.bundle cifar10 cifar_cnn_distributed.py`` writes it where you want it.
Importing this package does not import TensorFlow or PyTorch.
"""

from __future__ import annotations

from pathlib import Path

from .bundle import SCRIPTS, bundled_script

__all__ = ["SCRIPTS", "module_path"]


def module_path(name: str = "cifar10") -> Path:
    """The single file to upload as ``python_script`` for the training script ``name`` (e.g. ``"cifar10"``).

    It is named ``<name>.py`` and holds the script and the modules it imports (see ``bundle``); it is
    written to a cache folder on first use and then reused.
    """
    if name not in SCRIPTS:
        raise ValueError(f"no training script named {name!r}; available: {', '.join(SCRIPTS)}")
    return bundled_script(name)
