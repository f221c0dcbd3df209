"""Runs commands on this machine with subprocess: the local backend's nodes."""

from __future__ import annotations

import os
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

    def start_detached(self, command: str, *, log_path: str) -> None:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        with open(log_path, "ab") as log:
            subprocess.Popen(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._env,
                close_fds=True,
            )

    def __repr__(self) -> str:
        return f"LocalRunner({self.node!r})"
