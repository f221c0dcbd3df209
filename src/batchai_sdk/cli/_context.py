"""What every command handler gets: the parsed command line, the profile, the registry and the workspaces it
opened (closed when the command ends); and what it returns."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._models import validate_name
from ._format import TableLayout
from ._state import Profile, Registry, batchai_home, validate_group

if TYPE_CHECKING:
    from ..experiment import Experiment
    from ..workspace import Workspace


class UsageError(Exception):
    """The command line cannot run as given (exit status 2)."""


class Cancelled(Exception):
    """The user answered no to a confirmation."""


@dataclass
class Result:
    value: Any
    table: TableLayout | None = None
    exit_code: int = 0


Handler = Callable[["Context", argparse.Namespace], "Result | None"]


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.home = batchai_home()
        self.profile = Profile(self.home)
        self.registry = Registry(self.home)
        self._opened: list[Workspace] = []

    def close(self) -> None:
        for ws in self._opened:
            ws.close()

    @staticmethod
    def note(text: str) -> None:
        print(f"note: {text}", file=sys.stderr)

    def confirm(self, what: str) -> None:
        if getattr(self.args, "yes", False):
            return
        if not sys.stdin or not sys.stdin.isatty():
            raise UsageError(f"refusing to {what} without confirmation: no terminal to ask on; add --yes")
        answer = input(f"Are you sure you want to {what}? (y/n): ")
        if answer.strip().lower() not in ("y", "yes"):
            raise Cancelled

    def _required(self, attr: str, flag: str, default_key: str) -> str:
        value = getattr(self.args, attr, None) or self.profile.default(default_key)
        if not value:
            raise UsageError(
                f"{flag} is required (or set a default: batchai configure --defaults {default_key}=NAME)"
            )
        return str(value)

    def group(self) -> str:
        return validate_group(self._required("resource_group", "--resource-group/-g", "group"))

    def workspace_name(self) -> str:
        return validate_name(self._required("workspace", "--workspace/-w", "workspace"), "workspace name")

    def experiment_name(self) -> str:
        return self._required("experiment", "--experiment/-e", "experiment")

    def optional_group(self) -> str | None:
        value = getattr(self.args, "resource_group", None) or self.profile.default("group")
        return validate_group(value) if value else None

    def open_workspace(
        self, group: str | None = None, name: str | None = None, *, entry: dict[str, Any] | None = None
    ) -> Workspace:
        """Workspace ``name`` of ``group``, closed when the command ends (``entry``: not registered yet)."""
        from ..workspace import Workspace

        group = group or self.group()
        name = name or self.workspace_name()
        ws = Workspace.from_registry_entry(entry or self.registry.workspace_entry(group, name), group, name)
        self._opened.append(ws)
        return ws

    def experiment(self) -> tuple[str, Workspace, Experiment]:
        group = self.group()
        ws = self.open_workspace(group)
        return group, ws, ws.get_experiment(self.experiment_name())
