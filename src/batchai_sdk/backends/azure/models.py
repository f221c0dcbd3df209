"""The azure-mgmt-* models (the ARM request bodies' own types), imported when first used: the SDKs load
only when Azure is used, and a missing one says which extra to install. Type checkers see the real
modules, so a body's property names and types are checked (``Sku(capacity=...)``)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from . import _sdk


class _Lazy:
    def __init__(self, module: str) -> None:
        self._module = module
        self._loaded: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if self._loaded is None:
            self._loaded = _sdk.load(self._module)
        return getattr(self._loaded, name)


if TYPE_CHECKING:
    from azure.mgmt.authorization.v2022_04_01 import models as am
    from azure.mgmt.compute import models as cm
    from azure.mgmt.network import models as nm
    from azure.mgmt.resource.resources import models as rm
    from azure.mgmt.storage import models as sm
else:
    am = _Lazy("azure.mgmt.authorization.v2022_04_01.models")
    cm = _Lazy("azure.mgmt.compute.models")
    nm = _Lazy("azure.mgmt.network.models")
    rm = _Lazy("azure.mgmt.resource.resources.models")
    sm = _Lazy("azure.mgmt.storage.models")

__all__ = ["am", "cm", "nm", "rm", "sm"]
