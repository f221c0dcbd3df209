"""``azure.batch.models`` (the request bodies' own types), imported when first used: the SDK loads only
when Azure Batch is used, and a missing ``azure-batch`` says which extra to install. Type checkers see the
real module, so a body's property names and types are checked (``UserIdentity(username=...)``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..azure._sdk import LazyModule

if TYPE_CHECKING:
    from azure.batch import models as bm
    from azure.mgmt.batch import models as mgmt
else:
    bm = LazyModule("azure.batch.models")
    mgmt = LazyModule("azure.mgmt.batch.models")

__all__ = ["bm", "mgmt"]
