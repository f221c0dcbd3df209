"""The namespace nodes themselves (tests/nsnodes.py): separate machines as the node-failure tests need
them, nothing left behind — also after a run that died without cleaning up."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from nsnodes import NET, NodesUnavailable, NSNodes, skip_reason, start_nodes

pytestmark = pytest.mark.nsnodes


def made_by(prefix: str) -> tuple[list[str], list[str]]:
    """The network namespaces and links whose names start with ``prefix``."""
    netns = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
             text=True, check=True).stdout.splitlines() if line.startswith(prefix)]  # fmt: skip
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in subprocess.run(
            ["ip", "-o", "link"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.split(":")[1].strip().startswith(prefix)
    ]
    return netns, links


def test_each_node_is_its_own_machine(ns_nodes: NSNodes, tmp_path: Path) -> None:
    one, two = ns_nodes["node1"], ns_nodes["node2"]
    assert one.run("hostname").stdout.strip() == "node1"
    # own network: one address on the test's range, no route anywhere else
    assert one.run("ip -4 -o addr show dev eth0").stdout.split()[3] == f"{one.address}/27"
    assert one.address.startswith(f"{NET}.") and not one.address.startswith("192.0.2.")
    routes = one.run("ip route").stdout.splitlines()
    assert len(routes) == 1 and "default" not in routes[0], routes
    # own PID namespace: PID 1 is the node's init, and the other node's processes are not there
    assert "init.py" in one.processes()[1]
    assert set(one.host_pids()).isdisjoint(two.host_pids())
    # private /tmp, shared session folder
    one.run("echo mine > /tmp/only-here")
    assert one.run("cat /tmp/only-here").stdout == "mine\n"
    assert two.run("cat /tmp/only-here").returncode != 0
    assert not Path("/tmp/only-here").exists()
    (tmp_path / "seen").write_text("everywhere")
    assert two.run(f"cat {tmp_path / 'seen'}").stdout == "everywhere"
    # a partition: node2 no longer reaches node1; healed, it does
    ssh_port = f"import socket; socket.create_connection(('{one.address}', 22), timeout=2).close()"
    python = shlex.quote(sys.executable)
    assert two.run(f'{python} -c "{ssh_port}"').returncode == 0
    one.partition()
    try:
        assert two.run(f'{python} -c "{ssh_port}"').returncode != 0
    finally:
        one.heal()


DIES = """
import os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from nsnodes import start_nodes
with start_nodes(Path({directory!r}), Path({directory!r}), 2) as nodes:
    print(nodes.prefix, flush=True)
    os._exit(1)  # a run that dies: no cleanup
"""


def test_a_dead_runs_namespaces_and_links_are_removed_by_the_next(tmp_path: Path) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    code = DIES.format(tests=str(Path(__file__).parent), directory=str(tmp_path / "dead"))
    dead = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    prefix = dead.stdout.strip()
    if not prefix:
        pytest.skip(f"namespace nodes: {dead.stderr.strip()[-300:]}")
    netns, links = made_by(f"{prefix}")
    assert len(netns) == 2 and f"{prefix}br" in links  # left behind, with its nodes' processes
    try:
        with start_nodes(tmp_path / "next", tmp_path / "next", 2) as nodes:
            assert nodes.prefix == prefix  # the slot the dead run held, free again
            assert all(n.running for n in nodes.nodes.values())
    except NodesUnavailable as exc:
        pytest.skip(f"namespace nodes: {exc}")
    assert made_by(prefix) == ([], [])


def test_the_checkout_and_its_python_are_seen_on_every_node(ns_nodes: NSNodes) -> None:
    """Wherever this checkout lies (under /tmp too, which each node covers with its own), every node
    runs the tests' Python and imports batchai_sdk from this checkout, as jobs do."""
    probe = "import batchai_sdk, sys; print(sys.prefix); print(batchai_sdk.__file__)"
    for node in ns_nodes.nodes.values():
        ran = node.run(f"cd / && {shlex.quote(sys.executable)} -c {shlex.quote(probe)}")
        assert ran.returncode == 0, ran.stderr
        prefix, module = ran.stdout.split("\n")[:2]
        assert prefix == sys.prefix and Path(module).is_relative_to(Path(__file__).resolve().parents[1])


UNDER_TMP = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from nsnodes import start_nodes
with start_nodes(Path({directory!r}), Path({directory!r}), 1) as nodes:
    print(nodes["node1"].run("ls " + {venv!r}.replace(" ", "' '") + "/bin").stdout, flush=True)
"""


def test_a_python_under_tmp_in_a_folder_with_a_space_is_seen_on_the_nodes(tmp_path: Path) -> None:
    """Nodes started by a Python whose venv lies under /tmp, in a folder whose name has a space (a clone
    under /tmp is where people try things), see that venv: each node's private /tmp does not hide it."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="bai clone ", dir="/tmp") as clone:
        venv = Path(clone) / ".venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
        code = UNDER_TMP.format(
            tests=str(Path(__file__).parent), directory=str(tmp_path / "nodes"), venv=str(venv)
        )
        ran = subprocess.run(
            [str(venv / "bin" / "python"), "-c", textwrap.dedent(code)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if "NodesUnavailable" in ran.stderr:
            pytest.skip(f"namespace nodes: {ran.stderr.strip()[-300:]}")
        assert ran.returncode == 0, ran.stderr[-2000:]
        assert "python" in ran.stdout.split(), ran.stdout
