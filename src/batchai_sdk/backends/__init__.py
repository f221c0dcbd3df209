"""Backends: where nodes and the share come from (local, SSH, Azure)."""

from .base import Backend, ClusterStatus, LaunchTarget

__all__ = ["Backend", "ClusterStatus", "LaunchTarget"]
