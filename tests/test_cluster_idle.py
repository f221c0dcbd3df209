"""Is this cluster forgotten? ``batchai cluster list`` / ``cluster show`` and ``Cluster.idle_since`` /
``idle_seconds`` / ``nodes_up`` on the local backend, with real jobs: a cluster is idle since its creation
until a job comes, busy while one is queued or runs, then idle since that job's end."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from batchai_sdk import JobState, Workspace
from batchai_sdk._display import human_span
from batchai_sdk.cli import main

pytestmark = pytest.mark.mpi

G = ["-g", "lab", "-w", "ws"]


def batchai(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, f"batchai {' '.join(argv)} -> {code}: {err}"
    return out


def listed(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in json.loads(batchai(capsys, "cluster", "list", *G, "-o", "json"))}


def table(capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    lines = batchai(capsys, "cluster", "list", *G, "-o", "table").splitlines()
    header = [c.strip() for c in lines[0].split("  ") if c.strip()]
    assert header[-2:] == ["Nodes", "Idle For"], header
    return {line.split()[0]: line.split() for line in lines[2:]}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_cluster_list_tells_busy_from_idle_and_for_how_long(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batchai(capsys, "group", "create", "-n", "lab", "-l", "eastus")
    batchai(capsys, "workspace", "create", "-g", "lab", "-w", "ws")
    batchai(capsys, "experiment", "create", *G, "-n", "e")
    batchai(capsys, "cluster", "create", *G, "-n", "used", "--target", "2")
    batchai(
        capsys, "cluster", "create", *G, "-n", "auto", "--min", "0", "--max", "1", "--idle-seconds", "600"
    )
    created = time.time()

    time.sleep(1.5)
    clusters = listed(capsys)
    for name, up in (("used", 2), ("auto", 0)):  # no job yet: idle since creation
        c = clusters[name]
        assert c["currentNodeCount"] == up
        since = datetime.fromisoformat(str(c["idleSince"])).timestamp()
        assert abs(since - created) < 5, (since, created)
        assert isinstance(c["idleSeconds"], int) and 1 <= c["idleSeconds"] < 30
    rows = table(capsys)  # ... Nodes, Idle For ("1s")
    assert rows["used"][-2] == "2" and rows["used"][-1].endswith("s"), rows
    assert rows["auto"][-2] == "0" and rows["auto"][-1].endswith("s"), rows

    script = tmp_path / "busy.py"
    script.write_text("import time\ntime.sleep(4)\n")
    batchai(capsys, "job", "create", *G, "-e", "e", "-n", "j", "-c", "used", "--nodes", "2",
            "--python-script", str(script))  # fmt: skip
    deadline = time.monotonic() + 60
    while listed(capsys)["used"]["idleSince"] is not None:  # busy from the moment it is queued
        assert time.monotonic() < deadline
        time.sleep(0.2)
    c = listed(capsys)["used"]
    assert c["idleSeconds"] is None and c["currentNodeCount"] == 2
    assert table(capsys)["used"][-2:] == ["2", "-"]

    ws = Workspace.local(root=next(home.glob("**/workspaces/ws")))  # the SDK sees the same
    job = ws.get_experiment("e").get_job("j")
    assert job.wait(timeout=60, poll_interval=0.2) is JobState.SUCCEEDED
    end = job.status.end_time
    assert end is not None
    cluster = ws.get_cluster("used")
    deadline = time.monotonic() + 30
    while cluster.idle_since is None:  # the scheduler publishes the nodes free once cleaned up
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert abs((cluster.idle_since - end).total_seconds()) < 1, (cluster.idle_since, end)
    assert cluster.nodes_up == 2
    time.sleep(1.2)
    seconds = cluster.idle_seconds
    assert seconds is not None and 1 <= seconds < 30
    shown = json.loads(batchai(capsys, "cluster", "show", *G, "-n", "used", "-o", "json"))
    assert shown["idleSince"] == cluster.idle_since.isoformat()
    assert listed(capsys)["auto"]["idleSince"] is not None  # the other cluster is untouched by this job
    ws.close()


def test_idle_durations_read_as_a_person_would_say_them() -> None:
    assert [human_span(s) for s in (None, 0, 59.9, 60, 725, 3600, 11_220, 86_400, 190_000)] == [
        "-", "0s", "59s", "1m00s", "12m05s", "1h00m", "3h07m", "1d00h", "2d04h",
    ]  # fmt: skip


def test_a_record_from_an_older_scheduler_says_unknown_not_idle(ws: Workspace) -> None:
    cluster = ws.create_cluster("old", vm_size="Standard_NC4as_T4_v3", nodes=1)
    assert cluster.idle_since == cluster.spec.created  # no job ever: idle since its creation
    record = ".batchai/clusters/old/nodes.json"
    ws.share.write_json(record, {"nodes": {}, "queued": [], "down": []})  # written before idle_since existed
    assert cluster.idle_since is None and cluster.idle_seconds is None
    ws.share.write_json(record, {"nodes": {}, "queued": ["e/j"], "down": [], "idle_since": None})
    assert cluster.idle_since is None  # a job waits: busy
    ended = "2030-01-02T03:04:05+00:00"
    ws.share.write_json(record, {"nodes": {}, "queued": [], "down": [], "idle_since": ended})
    assert cluster.idle_since is not None and cluster.idle_since.isoformat() == ended
    assert cluster.idle_seconds == 0.0  # never negative, whatever the clocks say
