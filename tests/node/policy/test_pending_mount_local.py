"""A queued job whose storage cannot be used waits, saying so (``mount_unavailable``), instead of starting
and failing on it; once the storage is back it runs. Real local jobs through the cluster's scheduler; the
storage is the user's own folder (``Workspace.local(storage_root=...)``, standing for a file share), taken
away and given back as a user would, its files written through ``ws.storage``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _job_waits import pending_of, running
from batchai_sdk import AzureFileShare, JobState, Workspace

SLEEP = "sleep 120"


@pytest.mark.slow
@pytest.mark.parametrize("declared", [False, True], ids=["job-mount", "cluster-mount"])
def test_a_job_whose_storage_is_gone_waits_naming_it_and_runs_once_it_is_back(
    tmp_path: Path, declared: bool
) -> None:
    storage = tmp_path / "storage"
    data = AzureFileShare("data", "acct", "data")
    ws = Workspace.local(root=tmp_path / "ws", storage_root=storage)
    try:
        ws.storage(data).write_text("hello.txt", "hello from the share\n")
        cluster = ws.create_cluster("c", nodes=1, mounts=[data] if declared else [])
        exp = ws.create_experiment("e")
        blocker = exp.create_job("blocker", cluster="c", command_line=SLEEP, toolkit="custom")
        blocker.submit()
        running(blocker)
        reader = exp.create_job(
            "reader",
            cluster="c",
            command_line="cat $AZ_BATCHAI_JOB_MOUNT_ROOT/data/hello.txt",
            toolkit="custom",
            mounts=[data],
        )
        reader.submit()
        after = exp.create_job("after", cluster="c", command_line="echo no mounts", toolkit="custom")
        after.submit()
        shutil.rmtree(storage)  # the share goes away while the job waits for a node
        blocker.terminate()
        why = pending_of(reader, "mount_unavailable")
        node = sorted(cluster.node_states())[0]
        assert "data" in why.message and node in why.message, why
        assert list(why.nodes) == [node] and "missing or not mounted" in why.nodes[node]
        assert why.nodes[node].startswith("data: ")
        assert why.estimated_start is None
        assert "mount_unavailable" in reader.status.pending.line()  # type: ignore[union-attr]
        # a job behind it that mounts nothing is not held back by it
        assert after.wait(timeout=60) is JobState.SUCCEEDED, after.status.failure_reason
        assert reader.state is JobState.QUEUED
        ws.storage(data).write_text("hello.txt", "hello again\n")  # the share is back
        assert reader.wait(timeout=60) is JobState.SUCCEEDED, reader.status.failure_reason
        assert list(reader.stream("stdout.txt", follow=False)) == ["hello again"]
    finally:
        ws.close()
