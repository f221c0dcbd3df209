"""Hang verdicts over real sshd nodes for the cases the stacks alone do not settle, or without py-spy: two
gloo ranks in different collectives (the flight recorder, written on each node, names the one that strayed)
a sleeping rank whose stacks come from faulthandler (``BATCHAI_PY_SPY=off``), read back on its node, and a
Horovod deadlock (3 ranks on 2 nodes, rank 1 broadcasting where the others all-reduce) caught through its
stall warnings with rank 1 named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import Workspace
from hang_jobs import (
    ALLREDUCE_LINE,
    BARRIER_LINE,
    BROADCAST_LINE,
    HOROVOD,
    NOTICE,
    REDUCE_LINE,
    SLEEP_LINE,
    TRAIN,
    notice_within,
    start,
    write_train,
)

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


def test_a_horovod_deadlock_on_ssh_nodes_is_caught_through_its_stall_warnings_and_names_the_rank(
    lab: Workspace, tmp_path: Path
) -> None:
    pytest.importorskip("horovod.tensorflow")
    script = tmp_path / "hvd" / "train.py"
    script.parent.mkdir()
    script.write_text(HOROVOD)
    exp = lab.create_experiment("hvd")
    cluster = lab.create_cluster("c", nodes=2, exist_ok=True)
    job = exp.create_job("hvd", cluster=cluster, node_count=2, process_count=3, toolkit="horovod",
                         python_script=str(script), hang_notice=NOTICE,
                         environment={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"}).submit()  # fmt: skip
    try:
        notice, _ = notice_within(job, NOTICE)
        warned = [
            line for line in job.tail("stderr.txt", 300) if "One or more tensors were submitted" in line
        ]
        assert warned, (notice, job.tail("stderr.txt", 40))  # every 2 s, not taken for progress
        assert notice.startswith("possibly hung — stuck at step 5: rank 1 on "), notice
        assert f"waits in broadcast at train.py:{BROADCAST_LINE}; " in notice, notice
        assert f"ranks 0, 2 wait in allreduce at train.py:{ALLREDUCE_LINE}" in notice, notice
        assert "; Horovod: " in notice and "waits for rank 1" in notice, notice
    finally:
        job.terminate()
