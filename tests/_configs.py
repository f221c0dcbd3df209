"""Configurations tests hand to the code: a scheduler's cluster configuration as the local backend writes it,
and mountVolumes in the shape of Microsoft's recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def local_cluster_config(share: Path, nodes: int, *, idle_exit_seconds: float = 0) -> dict[str, Any]:
    """A scheduler's cluster configuration for ``nodes`` nodes on this machine, its share at ``share``
    (as the local backend writes it), for tests that run the node code by hand."""
    import sys

    import batchai_sdk.node

    return {
        "cluster": "c",
        "nodes": [{"id": f"n{i}", "address": "localhost", "machine": "m", "slots": 1} for i in range(nodes)],
        "ssh_command": None,
        "python": sys.executable,
        "node_main": str(Path(batchai_sdk.node.__file__).parent / "__main__.py"),
        "meta_root": str(share / ".batchai"),
        "cluster_dir": str(share / ".batchai" / "clusters" / "c"),
        "env": {},
        "idle_exit_seconds": idle_exit_seconds,
    }


def recipe_mount_volumes() -> dict[str, Any]:
    """mountVolumes in the shape of Microsoft's recipes (Horovod-Tensorflow: a logs and a scripts share;
    batch scoring: a blob container), a fresh copy each call."""
    url = "https://<AZURE_BATCHAI_STORAGE_ACCOUNT>.file.core.windows.net/"
    return {
        "azureFileShares": [
            {"azureFileUrl": url + "logs", "relativeMountPath": "logs"},
            {"azureFileUrl": url + "scripts", "relativeMountPath": "scripts"},
        ],
        "azureBlobFileSystems": [
            {
                "accountName": "<AZURE_BATCHAI_STORAGE_ACCOUNT>",
                "containerName": "data",
                "relativeMountPath": "data",
            }
        ],
    }
