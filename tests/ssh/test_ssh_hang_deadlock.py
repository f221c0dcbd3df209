"""Hang verdicts over real sshd nodes for the cases the stacks alone do not settle, or without py-spy: two
gloo ranks in different collectives (the flight recorder, written on each node, names the one that strayed)
and a sleeping rank whose stacks come from faulthandler (``BATCHAI_PY_SPY=off``), read back on its node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import Workspace
from hang_jobs import BARRIER_LINE, NOTICE, REDUCE_LINE, SLEEP_LINE, TRAIN, notice_within, start, write_train

pytest.importorskip("torch")
pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.slow]
GLOO = {"GLOO_SOCKET_IFNAME": "lo"}
FAULTHANDLER = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); "


@pytest.fixture(scope="module")
def lab(ssh_nodes: SSHNodes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("deadlocks")
    (root / "mnt" / "share").mkdir(parents=True)
    ws = ssh_nodes.workspace("deadlocks", root, list(NODE_ADDRESSES[:2]))
    yield ws
    ws.close()


def test_two_gloo_ranks_in_different_collectives_on_ssh_nodes_name_the_one_that_strayed(
    lab: Workspace, tmp_path: Path
) -> None:
    job = start(lab, write_train(tmp_path), "skip", ranks=2, environment=GLOO)
    try:
        notice, _ = notice_within(job, NOTICE)
        vm0, vm1 = job.status.nodes
        blamed = f"stuck at step 5: rank 1 on {vm1} waits in barrier at train.py:{BARRIER_LINE}; "
        assert blamed + f"rank 0 on {vm0} waits in all_reduce at train.py:{REDUCE_LINE}; " in notice, notice
        assert "flight recorder: rank 0 at collective #" in notice, notice
    finally:
        job.terminate()


def test_without_py_spy_a_sleeping_rank_on_an_ssh_node_is_named_from_its_faulthandler_dump(
    lab: Workspace, tmp_path: Path
) -> None:
    train = write_train(tmp_path)
    train.write_text(FAULTHANDLER + TRAIN)
    job = start(lab, train, "sleep", environment={**GLOO, "BATCHAI_PY_SPY": "off"})
    try:
        notice, _ = notice_within(job, NOTICE)
        vm0, vm1 = job.status.nodes
        assert f"rank 1 on {vm1} is in train.py:{SLEEP_LINE} (time.sleep(3600))" in notice, notice
        assert f"rank 0 on {vm0} waits in all_reduce at train.py:{REDUCE_LINE}" in notice, notice
        stacks = job.tail(f"stacks-{vm1}.txt", 60)
        assert any("faulthandler signal SIGUSR1 (BATCHAI_PY_SPY=off" in line for line in stacks), stacks
    finally:
        job.terminate()
