"""Runs commands on this machine with subprocess: the local backend's nodes."""

from __future__ import annotations

import subprocess

from ..exceptions import BatchAITimeoutError
from .base import CommandResult, Runner


class LocalRunner(Runner):
    def __init__(self, node: str = "localhost", *, env: dict[str, str] | None = None) -> None:
        self.node = node
        self._env = env

    def run(self, command: str, *, timeout: float | None = None, stdin: str | None = None) -> CommandResult:
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", command],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self._env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BatchAITimeoutError(f"command on {self.node}", timeout or 0) from None
        return CommandResult(self.node, proc.returncode, proc.stdout, proc.stderr)

    def __repr__(self) -> str:
        return f"LocalRunner({self.node!r})"
