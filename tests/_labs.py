"""``ssh_lab(hosts)``: the one way a test module gets a workspace on real machines (sshd nodes on loopback,
tests/ssh/sshd.py, or namespace nodes, tests/nsnodes.py), shared by the module's tests.

    lab = ssh_lab([HEAD, SECOND], "crash")                    # Workspace.ssh on two sshd nodes
    lab = ssh_lab(3, "spare", nodes="ns_nodes")               # the first 3 namespace nodes

Every lab is a ``Workspace``. On sshd nodes it keeps everything in one folder (``lab_root``): the share at
``mnt/share``, the client's state, and the nodes' (``node_state``, where the cluster's scheduler keeps its
folder: ``scheduler_states``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from batchai_sdk import Workspace


def ssh_lab(
    hosts: Sequence[str] | int,
    name: str | None = None,
    *,
    nodes: str = "ssh_nodes",
    prepare: Callable[[Path], None] | None = None,
) -> Any:
    """A module-scoped fixture: ``Workspace.ssh`` named ``name`` (default: the module's ``WORKSPACE``) on
    ``hosts`` (addresses, or how many of the nodes' first addresses) of the fixture ``nodes`` (``ssh_nodes``
    or ``ns_nodes``), in a fresh folder that ``prepare`` may fill first; closed after the module."""

    @pytest.fixture(scope="module")
    def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
        machines = request.getfixturevalue(nodes)
        label: str = name if name is not None else request.module.WORKSPACE
        addresses = list(machines.addresses[:hosts] if isinstance(hosts, int) else hosts)
        root = tmp_path_factory.mktemp(label)
        if prepare is not None:
            prepare(root)
        ws: Workspace = machines.workspace(label, root, addresses)
        yield ws
        ws.close()

    return lab


def lab_root(ws: Workspace) -> Path:
    """The folder a lab on sshd nodes keeps everything in (what ``prepare`` was given)."""
    return Path(ws.backend.node_state_dir).parent  # type: ignore[attr-defined]  # an SSH backend's


def scheduler_states(ws: Workspace) -> Path:
    """Where the lab's head node keeps its clusters' scheduler folders (``<cluster>/sched.db``, ...)."""
    return lab_root(ws) / "node_state" / "tmp" / "scheduler"
