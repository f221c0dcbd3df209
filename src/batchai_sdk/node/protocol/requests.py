"""The scheduler's socket: the codes of a refused request and the reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .names import E_NEEDS_CLUSTER as E_NEEDS_CLUSTER
from .records import _str

# ctl: the error codes of a refused request
E_EXISTS, E_CAPACITY, E_INVALID, E_UNAVAILABLE = "exists", "capacity", "invalid", "unavailable"
E_REQUEST_REUSED = "request_id_reused"  # a request_id already named a submit with other content


@dataclass(frozen=True)
class CtlReply:
    """A scheduler's reply: ``ok``, or the refusal's ``error`` code (``E_*``) and message; other keys
    (``id``, ``found``, ``state``...) as the operation gives them."""

    ok: bool
    error: str | None = None
    message: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {**self.data, "ok": self.ok}
        if not self.ok:
            out.update(error=self.error, message=self.message)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CtlReply:
        rest = {k: v for k, v in data.items() if k not in ("ok", "error", "message")}
        return cls(bool(data.get("ok")), _str(data.get("error")), _str(data.get("message")), rest)

    @classmethod
    def refused(cls, error: str, message: str) -> CtlReply:
        return cls(False, error, message)
