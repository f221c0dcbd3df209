"""The cluster owner's doors for health reports of their own tools (docs/health.md): a health source
named at create (an NHC cron job's folder on the head node, outside the share), whose reports are applied
only when root or the scheduler's user owns them and no one else can write them; and
``batchai cluster check --report FILE``, which hands a report to the scheduler as
``Cluster.apply_health_report`` does."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from _procs import wait_for
from batchai_sdk import JobState, Workspace
from batchai_sdk.cli import main
from batchai_sdk.exceptions import ValidationError

pytestmark = pytest.mark.slow


def _write(folder: Path, name: str, doc: dict[str, object], mode: int = 0o644) -> None:
    """As a health tool writes its report: a new file renamed into place."""
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps(doc))
    tmp.chmod(mode)
    os.replace(tmp, folder / name)


def test_reports_in_the_owners_health_source_are_applied_and_others_writable_ones_ignored(
    ws: Workspace, tmp_path: Path
) -> None:
    source = tmp_path / "nhc"
    source.mkdir(mode=0o755)
    source.chmod(0o755)
    cluster = ws.create_cluster("c", nodes=2, health_source=str(source))
    assert ws.get_cluster("c").spec.health_source == str(source)
    first, second = sorted(cluster.node_states())
    exp = ws.create_experiment("e")
    keep_up = exp.create_job("keep", cluster=cluster, command_line="sleep 120", toolkit="custom").submit()
    try:
        wait_for(lambda: keep_up.state is JobState.RUNNING, timeout=60, what="the job to run")
        _write(source, "nhc.json", {"level": "basic", "nodes": [first, second],
                                    "unusable": {second: "nhc: ib0 down"}, "started": time.time()})  # fmt: skip
        wait_for(lambda: cluster.unusable_nodes() == {second: "nhc: ib0 down"}, timeout=30,
                 what="the source's report to apply")  # fmt: skip
        # a file anyone may write is no verdict of the owner's: its forged pass changes nothing
        _write(source, "forged.json", {"level": "basic", "nodes": [second], "unusable": {},
                                       "started": time.time() + 3600}, mode=0o666)  # fmt: skip
        time.sleep(3)
        assert cluster.unusable_nodes() == {second: "nhc: ib0 down"}
        # the tool's next report passes the node: it is let in again
        _write(source, "nhc.json", {"level": "basic", "nodes": [second], "unusable": {},
                                    "started": time.time()})  # fmt: skip
        wait_for(lambda: cluster.unusable_nodes() == {}, timeout=30, what="the pass to apply")
    finally:
        keep_up.terminate(timeout=60)
    log = (ws.backend.root / "tmp" / "scheduler" / "c" / "scheduler.log").read_text()  # type: ignore[attr-defined]
    assert "forged.json ignored: " in log and "writable by others" in log


def test_a_health_source_must_be_a_folder_outside_the_share(ws: Workspace, tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as err:
        ws.create_cluster("rel", nodes=1, health_source="nhc/reports")
    assert err.value.field == "health_source"
    share: Path = ws.share.root  # type: ignore[attr-defined]  # the local backend's share is a folder
    cluster = ws.create_cluster("onshare", nodes=1, health_source=str(share / "nhc"))
    job = ws.create_experiment("e").create_job("j", cluster=cluster, command_line="true", toolkit="custom")
    with pytest.raises(ValidationError) as err:
        job.submit()  # the scheduler never reads reports from where jobs can write
    assert err.value.field == "health_source" and "outside the share" in str(err.value)


def cli(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 0) -> dict[str, object]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == status, f"batchai {' '.join(argv)} -> {code}\n{out}\n{err}"
    return json.loads(out) if out.strip().startswith("{") else {"stderr": err}


def test_cluster_check_report_hands_a_tools_verdict_to_the_scheduler(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "nhc"
    source.mkdir()
    shown = cli(capsys, "cluster", "create", "-n", "c", "--target", "2", "--health-source", str(source))
    assert shown["name"] == "c"
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps({"level": "basic", "nodes": ["vm_0", "vm_1"], "unusable": {"vm_1": "dcgm: xid 79"}})
    )
    out = cli(capsys, "cluster", "check", "-n", "c", "--report", str(report), status=1)  # a node kept out
    assert out["unusable"] == {"vm_1": "dcgm: xid 79"} and out["cluster_unusable"] == {"vm_1": "dcgm: xid 79"}
    report.write_text(json.dumps({"level": "basic", "nodes": ["vm_1"], "unusable": {}}))
    out = cli(capsys, "cluster", "check", "-n", "c", "--report", str(report))
    assert out["cluster_unusable"] == {}
    report.write_text("{not json")
    bad = cli(capsys, "cluster", "check", "-n", "c", "--report", str(report), status=1)
    assert "--report" in str(bad["stderr"])


def test_a_health_source_folder_others_can_write_is_not_believed(ws: Workspace, tmp_path: Path) -> None:
    source = tmp_path / "open"
    source.mkdir()
    source.chmod(0o777)  # any account (a job's too, were it another's) could put a report here
    cluster = ws.create_cluster("c", nodes=2, health_source=str(source))
    second = sorted(cluster.node_states())[1]
    exp = ws.create_experiment("e")
    keep_up = exp.create_job("keep", cluster=cluster, command_line="sleep 120", toolkit="custom").submit()
    try:
        wait_for(lambda: keep_up.state is JobState.RUNNING, timeout=60, what="the job to run")
        _write(source, "nhc.json", {"level": "basic", "nodes": [second], "unusable": {second: "forged"}})
        time.sleep(3)
        assert cluster.unusable_nodes() == {}
    finally:
        keep_up.terminate(timeout=60)
    log = (ws.backend.root / "tmp" / "scheduler" / "c" / "scheduler.log").read_text()  # type: ignore[attr-defined]
    assert "not trusted" in log and "writable by others" in log
