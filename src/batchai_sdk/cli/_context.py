"""What every command handler gets: the parsed command line, the profile, the registry and the workspaces it
opened (closed when the command ends); and what it returns."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._models import validate_name
from .._registry import Profile, Registry, batchai_home, validate_group
from ..exceptions import NotFoundError
from ._format import TableLayout

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


# ``ctx.scope()`` for a workspace outside the registry (``--root DIR``, or the default one in
# ``$BATCHAI_HOME``, the one ``Workspace.local()`` opens): views show no resource group for it.
NO_GROUP = ""
DEFAULT_EXPERIMENT = "default"  # the experiment of job commands without -e (as Azure ML's "Default")


class Context:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.home = batchai_home()
        self.profile = Profile(self.home)
        self.registry = Registry(self.home)
        self._opened: list[Workspace] = []

    @property
    def root(self) -> str | None:
        """``--root DIR``: a local workspace kept in DIR (``Workspace.local(root=DIR)``)."""
        value = getattr(self.args, "root", None)
        return str(value) if value else None

    def unregistered(self) -> bool:
        """Whether the command works on ``Workspace.local(root)`` instead of a ``-g/-w`` workspace: with
        ``--root``, or with neither ``-g`` nor ``-w`` given nor defaulted while the profile's backend is local
        (the default workspace in ``$BATCHAI_HOME``, shared with ``Workspace.local()``)."""
        if self.root is not None:
            if getattr(self.args, "resource_group", None) or getattr(self.args, "workspace", None):
                raise UsageError("--root names a workspace folder: give it without -g/-w")
            return True
        named = (
            getattr(self.args, "resource_group", None)
            or getattr(self.args, "workspace", None)
            or self.profile.default("group")
            or self.profile.default("workspace")
        )
        return not named and self.profile.backend == "local"

    def where(self, group: str, workspace: str) -> str:
        """The flags that name this workspace again in a hint (``-g G -w W``, ``--root DIR`` or none)."""
        if group != NO_GROUP:
            return f"-g {shlex.quote(group)} -w {shlex.quote(workspace)}"
        return f"--root {shlex.quote(self.root)}" if self.root is not None else ""

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

    def scope(self) -> str:
        """For commands on a workspace's contents: the ``-g`` resource group, or ``NO_GROUP`` for the
        workspace ``unregistered()`` says (then ``open_workspace(NO_GROUP)`` opens it)."""
        return NO_GROUP if self.unregistered() else self.group()

    def group(self) -> str:
        return validate_group(self._required("resource_group", "--resource-group/-g", "group"))

    def workspace_name(self) -> str:
        return validate_name(self._required("workspace", "--workspace/-w", "workspace"), "workspace name")

    def experiment_name(self) -> str:
        """``-e``, else the profile's default, else ``DEFAULT_EXPERIMENT`` (made by the first job create)."""
        value = getattr(self.args, "experiment", None) or self.profile.default("experiment")
        return str(value) if value else DEFAULT_EXPERIMENT

    def optional_group(self) -> str | None:
        value = getattr(self.args, "resource_group", None) or self.profile.default("group")
        return validate_group(value) if value else None

    def open_workspace(
        self, group: str | None = None, name: str | None = None, *, entry: dict[str, Any] | None = None
    ) -> Workspace:
        """Workspace ``name`` of ``group``, closed when the command ends (``entry``: not registered yet)."""
        from ..workspace import Workspace

        group = self.scope() if group is None else group
        if group == NO_GROUP and entry is None:
            ws = Workspace.local(self.root)
            self._opened.append(ws)
            return ws
        name = name or self.workspace_name()
        ws = Workspace.from_registry_entry(entry or self.registry.workspace_entry(group, name), group, name)
        self._opened.append(ws)
        if entry is None and ws.backend.kind == "local":
            from .storage import link_group_shares

            # the old one-share layout: a share named for this workspace is its own share (docs/storage.md)
            link_group_shares(self, self.registry.get_group(group), name, ws)
        return ws

    def experiment(self, *, create_default: bool = False) -> tuple[str, Workspace, Experiment]:
        """The ``-e`` experiment; ``create_default``: make ``DEFAULT_EXPERIMENT`` when it is the one meant."""
        group = self.scope()
        ws = self.open_workspace(group)
        name = self.experiment_name()
        if create_default and name == DEFAULT_EXPERIMENT:
            return group, ws, ws.create_experiment(name, exist_ok=True)
        try:
            return group, ws, ws.get_experiment(name)
        except NotFoundError as exc:
            if exc.kind != "experiment":
                raise
            flags = " ".join(p for p in ("batchai experiment create", self.where(group, ws.name)) if p)
            make = f"make it with `{flags} -n {shlex.quote(name)}`"
            raise NotFoundError(exc.kind, exc.name, exc.where, hint=make) from None
