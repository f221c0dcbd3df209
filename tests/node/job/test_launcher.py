"""The ports a job's ranks meet on (torch's rendezvous, TF's task ports: the first port plus the rank):
consecutive, free when picked, and below the kernel's ephemeral range, so that no outgoing connection takes
one of them between the pick and the ranks' start."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import pytest

from batchai_sdk.node.job.launcher import PORT_FLOOR, ephemeral_floor, free_port


def bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


@pytest.mark.parametrize("count", [1, 4, 16])
def test_the_ports_are_consecutive_free_and_below_the_ephemeral_range(count: int) -> None:
    base = free_port(count)
    assert base >= PORT_FLOOR and base + count <= ephemeral_floor()
    assert all(bindable(p) for p in range(base, base + count))


@pytest.fixture
def listeners() -> Iterator[set[int]]:
    """Several hundred ports of the range held by listening sockets."""
    held, ports = [], set()
    rng = random.Random(7)
    while len(held) < 300:
        port = rng.randrange(PORT_FLOOR, ephemeral_floor())
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("", port))
            s.listen()
        except OSError:
            s.close()
            continue
        held.append(s)
        ports.add(port)
    yield ports
    for s in held:
        s.close()


def test_a_port_in_use_is_never_handed_out(listeners: set[int]) -> None:
    for _ in range(100):
        base = free_port(8)
        assert not listeners & set(range(base, base + 8))
