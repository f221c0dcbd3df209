"""Backends: where nodes and the share come from (local, SSH, Azure)."""

from typing import TYPE_CHECKING, Any

from .base import Backend, ClusterStatus

if TYPE_CHECKING:
    from .base import LaunchTarget
else:

    def __getattr__(name: str) -> Any:
        if name == "LaunchTarget":  # loaded on first use, as in base.py
            from .base import LaunchTarget

            return LaunchTarget
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Backend", "ClusterStatus", "LaunchTarget"]
