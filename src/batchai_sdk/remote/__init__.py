"""How a command runs on a node: the Runner interface and its implementations."""

from .base import CommandResult, Runner, run_on_all

__all__ = ["CommandResult", "Runner", "run_on_all"]
