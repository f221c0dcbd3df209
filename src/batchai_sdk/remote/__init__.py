"""How a command runs on a node: the Runner interface and its implementations, and the one fan-out."""

from .base import CommandResult, Runner
from .fanout import GroupResult, fan_out

__all__ = ["CommandResult", "GroupResult", "Runner", "fan_out"]
