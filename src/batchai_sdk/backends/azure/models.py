"""The azure-mgmt-* models (the ARM request bodies' own types), imported when first used: the SDKs load
only when Azure is used, and a missing one says which extra to install. Type checkers see the real
modules, so a body's property names and types are checked (``Sku(capacity=...)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._sdk import LazyModule

if TYPE_CHECKING:
    from azure.mgmt.authorization.v2022_04_01 import models as am
    from azure.mgmt.compute import models as cm
    from azure.mgmt.network import models as nm
    from azure.mgmt.resource.resources import models as rm
    from azure.mgmt.storage import models as sm
else:
    am = LazyModule("azure.mgmt.authorization.v2022_04_01.models")
    cm = LazyModule("azure.mgmt.compute.models")
    nm = LazyModule("azure.mgmt.network.models")
    rm = LazyModule("azure.mgmt.resource.resources.models")
    sm = LazyModule("azure.mgmt.storage.models")

__all__ = ["am", "cm", "nm", "rm", "sm"]
