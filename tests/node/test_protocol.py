"""node/protocol/, the contract both halves read and write: every record survives its round trip, old
keys are read for one version, and the client's share paths are the protocol's."""

from __future__ import annotations

from pathlib import Path

from batchai_sdk import _layout as layout
from batchai_sdk.node.protocol.paths import SharePaths, eviction_marker, is_eviction_file
from batchai_sdk.node.protocol.records import NodeHold, NodesDoc, Reporter, StatusDoc
from batchai_sdk.node.protocol.requests import E_NO_REPLY, check_reply


def test_a_status_record_round_trips_and_keeps_keys_it_does_not_know() -> None:
    doc = StatusDoc(
        state="running",
        creation_time="2026-01-01T00:00:00+00:00",
        reporter=Reporter("head", 42, 7),
        nodes=["n0"],
        tag="abc",
        extra={"slurm_job_id": "12"},
    )
    data = doc.to_dict()
    assert data["reporter"] == {"host": "head", "pid": 42, "job_id": 7} and data["slurm_job_id"] == "12"
    assert "exit_code" not in data  # unset fields are left out, as the records always had them
    assert StatusDoc.from_dict(data) == doc


def test_old_reporter_keys_are_read_and_a_client_record_is_not_accepted() -> None:
    old_scheduler = StatusDoc.from_dict(
        {"state": "running", "scheduler": {"host": "h", "pid": 3, "job_id": 1}}
    )
    assert old_scheduler.reporter == Reporter("h", 3, 1) and old_scheduler.accepted
    old_wrapper = StatusDoc.from_dict({"state": "running", "wrapper_host": "n0", "wrapper_pid": 9})
    assert old_wrapper.reporter == Reporter("n0", 9) and "wrapper_host" not in old_wrapper.to_dict()
    client = StatusDoc.from_dict({"state": "queued", "creation_time": "t"})
    assert not client.accepted  # a submit still in flight: its client's, not a scheduler's


def test_a_job_a_scheduling_service_has_is_accepted_by_every_reader(tmp_path: Path) -> None:
    """One definition of "accepted" (issue #30, Batch finding 5): Batch and Slurm records name their
    service, the records they wrote before as ``scheduler: "azure-batch"`` included."""
    from batchai_sdk.backends.head_scheduler import with_cluster_heartbeat
    from batchai_sdk.share import LocalShare

    old_batch = {
        "state": "queued",
        "scheduler": "azure-batch",
        "batch_job_id": "j",
        "heartbeat": "2029-01-01T00:00:00+00:00",
    }
    doc = StatusDoc.from_dict(old_batch)
    assert doc.accepted and doc.reporter == Reporter(service="azure-batch")
    assert doc.to_dict()["reporter"] == {"host": None, "pid": None, "service": "azure-batch"}
    assert StatusDoc.from_dict(doc.to_dict()) == doc and doc.extra == {"batch_job_id": "j"}
    share = LocalShare(tmp_path)
    share.write_json(layout.SHARE.nodes_record("c"), {"heartbeat": "2030-01-01T00:00:00+00:00"})
    beat = with_cluster_heartbeat(share, "c", doc.to_dict())
    assert beat is not None and beat["heartbeat"] == "2030-01-01T00:00:00+00:00"  # read as accepted too
    client = {"state": "queued", "creation_time": "t"}
    assert with_cluster_heartbeat(share, "c", client) == client  # a submit in flight: not accepted


def test_nodes_record_and_ctl_reply_round_trip() -> None:
    doc = NodesDoc(nodes={"n0": NodeHold("e/a", "running")}, queued=["e/b"], down=["n1"], idle_since=None)
    assert NodesDoc.from_dict(doc.to_dict()) == doc
    full = NodesDoc(head_disk_error="disk full")
    assert NodesDoc.from_dict(full.to_dict()).head_disk_error == "disk full"
    assert not NodesDoc.from_dict({"nodes": {}}).has_idle_since  # an older scheduler's record
    refused = {"ok": False, "error": "exists", "message": "job e/a is already queued or running"}
    assert check_reply(refused) == refused
    assert check_reply({"ok": True, "id": 3, "newer": [1]}) == {"ok": True, "id": 3}  # unknown keys dropped
    assert check_reply({"ok": 1, "found": "yes", "pid": True, "exit_code": None}) == {
        "ok": False,
        "exit_code": None,
    }
    assert check_reply(["not", "a", "reply"])["error"] == E_NO_REPLY


def test_the_clients_layout_and_a_nodes_paths_are_the_protocols() -> None:
    node = SharePaths("/mnt/share")
    assert SharePaths.at_meta("/mnt/share/.batchai") == node
    assert node.status_record("e", "j") == "/mnt/share/" + layout.SHARE.status_record("e", "j")
    assert node.launch_config("e", "j") == "/mnt/share/" + layout.SHARE.launch_config("e", "j")
    assert node.nodes_record("c") == "/mnt/share/" + layout.SHARE.nodes_record("c")
    assert layout.job_output_root("logs", "e", "j") == "logs/experiments/e/jobs/j"
    assert layout.job_output_root(None, "e", "j") == layout.SHARE.job_dir("e", "j")
    assert is_eviction_file(eviction_marker("n0")) and not is_eviction_file("simulate-eviction-n0.json")
    assert is_eviction_file("simulate-eviction-n0.json", simulated=True)


def test_a_launchers_result_is_read_field_by_field_as_data() -> None:
    from batchai_sdk.node.protocol.launch import read_result

    left = {"exit_code": 3, "reason": "boom", "stopped_by_signal": None, "tag": "t1"}
    assert read_result(left) == left
    odd = {"exit_code": "3", "reason": ["x"], "stopped_by_signal": True, "tag": 7, "extra": 1}
    assert read_result(odd) == {"exit_code": None, "reason": None, "stopped_by_signal": None, "tag": None}
    assert read_result(["not", "a", "record"]) is None and read_result(None) is None
