"""Lazy imports of the Azure SDKs: the core imports without them; using Azure says which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...exceptions import MissingExtraError

# module → the PyPI distribution that provides it
_PACKAGES = {
    "azure.core": "azure-core",
    "azure.core.exceptions": "azure-core",
    "azure.core.pipeline.policies": "azure-core",
    "azure.core.credentials": "azure-core",
    "azure.identity": "azure-identity",
    "azure.mgmt.resource.resources": "azure-mgmt-resource",
    "azure.mgmt.compute": "azure-mgmt-compute",
    "azure.mgmt.network": "azure-mgmt-network",
    "azure.mgmt.storage": "azure-mgmt-storage",
    "azure.mgmt.authorization": "azure-mgmt-authorization",
    "azure.storage.fileshare": "azure-storage-file-share",
    "azure.mgmt.batch": "azure-mgmt-batch",
    "azure.batch": "azure-batch",
    "azure.batch.models": "azure-batch",
    "azure.mgmt.batch.models": "azure-mgmt-batch",
    "azure.mgmt.compute.models": "azure-mgmt-compute",
    "azure.mgmt.network.models": "azure-mgmt-network",
    "azure.mgmt.storage.models": "azure-mgmt-storage",
    "azure.mgmt.resource.resources.models": "azure-mgmt-resource",
    "azure.mgmt.authorization.v2022_04_01.models": "azure-mgmt-authorization",
}


def load(module: str) -> ModuleType:
    """Import ``module``; a missing Azure SDK becomes MissingExtraError naming the package and extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        package = _PACKAGES.get(module, module.replace(".", "-"))
        raise MissingExtraError(package, "azure") from exc


class LazyModule:
    """A module imported by ``load`` on its first attribute access (the request-body model modules)."""

    def __init__(self, module: str) -> None:
        self._module = module
        self._loaded: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if self._loaded is None:
            self._loaded = load(self._module)
        return getattr(self._loaded, name)


def core_exceptions() -> ModuleType:
    return load("azure.core.exceptions")


def identity() -> ModuleType:
    return load("azure.identity")


def resource() -> ModuleType:
    return load("azure.mgmt.resource.resources")


def compute() -> ModuleType:
    return load("azure.mgmt.compute")


def network() -> ModuleType:
    return load("azure.mgmt.network")


def storage() -> ModuleType:
    return load("azure.mgmt.storage")


def authorization() -> ModuleType:
    return load("azure.mgmt.authorization")


def fileshare() -> ModuleType:
    return load("azure.storage.fileshare")


def batch_mgmt() -> ModuleType:
    return load("azure.mgmt.batch")


def batch() -> ModuleType:
    return load("azure.batch")
