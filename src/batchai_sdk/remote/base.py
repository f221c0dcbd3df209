"""How a command runs on a node: one ``Runner`` interface, a local (subprocess) and an SSH one.

Commands are strings for a POSIX shell, always built with ``shlex.quote`` by the callers (see launch.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from ..exceptions import NodeError


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

    @abstractmethod
    def start_detached(self, command: str, *, log_path: str) -> None:
        """Start ``command`` in a new session on the node so that it outlives this client; return at once.

        Its stdout and stderr go to ``log_path`` (a path on the node).
        """

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

    def start_detached(self, command: str, *, log_path: str) -> None:
        self.runner.start_detached(command, log_path=log_path)


def run_on_all(
    runners: Mapping[str, Runner],
    command: str | Mapping[str, str],
    *,
    timeout: float | None = None,
    operation: str = "command",
    raise_on_error: bool = True,
) -> dict[str, CommandResult]:
    """Run a command on every node in parallel; per-node commands when ``command`` is a mapping.

    Returns every node's result. With ``raise_on_error`` a ``NodeError`` names each node that failed
    (non-zero exit or no connection) and why, and lists the nodes that succeeded.
    """
    results: dict[str, CommandResult] = {}
    failures: dict[str, str] = {}
    if not runners:
        return results
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(runners))) as pool:
        futures = {
            pool.submit(r.run, command if isinstance(command, str) else command[node], timeout=timeout): node
            for node, r in runners.items()
        }
        for fut in concurrent.futures.as_completed(futures):
            node = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:
                failures[node] = str(exc) or type(exc).__name__
                continue
            results[node] = res
            if not res.ok:
                failures[node] = res.describe()
    if failures and raise_on_error:
        raise NodeError(operation, dict(sorted(failures.items())), sorted(set(results) - set(failures)))
    return results
