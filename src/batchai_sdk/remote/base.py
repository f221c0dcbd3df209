"""How a command runs on a node: one ``Runner`` interface, a local (subprocess) and an SSH one.

Commands are strings for a POSIX shell, always built with ``shlex.quote`` by the callers (see launch.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class CommandResult:
    node: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        """A one-line reason for a failed command, from the end of its stderr."""
        tail = (self.stderr or self.stdout).strip().splitlines()
        return f"exit code {self.exit_code}" + (f": {tail[-1][:300]}" if tail else "")


class Runner(ABC):
    """Runs shell commands on one node. Opens lazily; a context manager; ``close()`` is idempotent."""

    node: str

    @abstractmethod
    def run(self, command: str, *, timeout: float | None = None, stdin: str | None = None) -> CommandResult:
        """Run ``command`` through ``sh -c`` on the node and wait for it (``timeout`` in seconds)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class BorrowedRunner(Runner):
    """A runner lent to a caller: ``close()`` leaves the connection to its owner (a backend keeps one
    connection per node and lends it out)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.node = runner.node

    def run(self, command: str, *, timeout: float | None = None, stdin: str | None = None) -> CommandResult:
        return self.runner.run(command, timeout=timeout, stdin=stdin)
