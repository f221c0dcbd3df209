"""``azure.batch.models`` (the request bodies' own types), imported when first used: the SDK loads only
when Azure Batch is used, and a missing ``azure-batch`` says which extra to install. Type checkers see the
real module, so a body's property names and types are checked (``UserIdentity(username=...)``)."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..azure import _sdk


class _Lazy:
    def __init__(self, module: str) -> None:
        self._module = module
        self._loaded: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if self._loaded is None:
            self._loaded = _sdk.load(self._module)
        return getattr(self._loaded, name)


if TYPE_CHECKING:
    from azure.batch import models as bm
    from azure.mgmt.batch import models as mgmt
else:
    bm = _Lazy("azure.batch.models")
    mgmt = _Lazy("azure.mgmt.batch.models")

__all__ = ["bm", "mgmt"]
