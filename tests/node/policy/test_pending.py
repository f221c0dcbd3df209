"""Why a queued job waits, and until when (``job.status.pending``), with real local jobs through the
cluster's scheduler: each blocker kind, the estimated start against the real one, and where the reason
shows (``job show``, ``job list -o table``, the stream, ``cluster show``, the notebook); and the
``job create`` flags that say how a job runs (``--max-wall-clock-time``, ``--priority``, ...)."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from _job_waits import pending_of, running
from batchai_sdk import JobState, Workspace
from batchai_sdk.batchai_json import parse_job_json, to_job_json
from batchai_sdk.cli import main
from batchai_sdk.job import Job, StatusLine

G = ["-g", "rg", "-w", "ws"]
SLEEP = "sleep 120"  # a job that runs until its wall clock limit or a terminate ends it


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., str]:
    """``batchai`` in-process on a local workspace ``rg/ws`` with experiment ``e``; returns stdout."""
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)

    def ok(*argv: str) -> str:
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, f"batchai {' '.join(argv)} -> {code}: {err}"
        return out

    ok("group", "create", "-n", "rg", "-l", "eastus")
    ok("workspace", "create", "-g", "rg", "-w", "ws")
    ok("experiment", "create", *G, "-n", "e")
    return ok


def sleeper(ws: Workspace, name: str, cluster: str, **kw: object) -> Job:
    exp = ws.create_experiment("e", exist_ok=True)
    job = exp.create_job(name, cluster=cluster, command_line=SLEEP, toolkit="custom", **kw)  # type: ignore[arg-type]
    job.submit()
    return job


def _end(*jobs: Job) -> None:
    for job in jobs:
        if not job.state.ended:
            job.terminate()


# -- kinds ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_waiting_jobs_say_their_place_the_jobs_ahead_and_a_start_within_10_percent(
    cli: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Three jobs on a one-node cluster, each ended by its 10 s wall clock limit: the third says it is
    second in the queue behind the second, held by the first, and when it starts — within 10% of the
    wait that followed — in job show, job list's table, the stream, cluster show and the notebook."""
    cli("cluster", "create", *G, "-n", "c", "--target", "1")
    for name in ("q1", "q2", "q3"):
        cli("job", "create", *G, "-e", "e", "-n", name, "-c", "c", "--command-line", SLEEP,
            "--toolkit", "custom", "--max-wall-clock-time", "10", "-o", "none")  # fmt: skip
    asked = datetime.now(timezone.utc)
    shown = json.loads(cli("job", "show", *G, "-e", "e", "-n", "q3"))
    pending = shown["pending"]
    assert shown["executionState"] == "queued"
    assert shown["constraints"] == {"maxWallClockTime": "PT10S"}
    assert pending["kind"] == "waiting_for_nodes" and pending["position"] == 2
    assert pending["ahead"] == ["e/q2"] and pending["aheadCount"] == 1
    assert "busy by q1" in pending["message"]
    estimated = datetime.fromisoformat(pending["estimatedStart"])
    # the table's column, the cluster's queue
    table = cli("job", "list", *G, "-e", "e", "-o", "table").splitlines()
    assert "Waiting for" in table[0]
    [q3_row] = [line for line in table if line.startswith("q3 ")]
    assert "waiting_for_nodes #2, ~" in q3_row
    queue = json.loads(cli("cluster", "show", *G, "-n", "c"))["queue"]
    assert [(q["job"], q["position"]) for q in queue] == [("e/q2", 1), ("e/q3", 2)]
    # the stream says why it waits, on stderr, before the job's output
    code, out, err = run_cli(capsys, "job", "file", "stream", *G, "-e", "e", "-j", "q3", "-f", "stdout.txt")
    assert "q3 is queued: waiting_for_nodes (#2 in the queue)" in err
    assert "q3 is queued: waiting_for_nodes (#1 in the queue)" in err  # once q2 started
    assert "[batchai]" not in out
    assert code != 0 and "maxWallClockTime of 10s exceeded" in err
    started = datetime.fromisoformat(json.loads(cli("job", "show", *G, "-e", "e", "-n", "q3"))["startTime"])
    waited = (started - asked).total_seconds()
    error = abs((estimated - started).total_seconds())
    print(f"estimated start {estimated}, real {started}: off by {error:.2f} s of a {waited:.1f} s wait")
    assert waited > 15 and error <= 0.1 * waited


@pytest.mark.slow
def test_a_later_higher_priority_job_is_named_and_the_cli_takes_priority(
    cli: Callable[..., str], tmp_path: Path
) -> None:
    cli("cluster", "create", *G, "-n", "c", "--target", "1")
    for name, priority in (("busy", "normal"), ("normal", "normal"), ("urgent", "high")):
        cli("job", "create", *G, "-e", "e", "-n", name, "-c", "c", "--command-line", SLEEP,
            "--toolkit", "custom", "--priority", priority, "-o", "none")  # fmt: skip
    ws = _cli_workspace(tmp_path)
    exp = ws.get_experiment("e")
    normal, urgent = exp.get_job("normal"), exp.get_job("urgent")
    why = pending_of(normal, "priority")
    assert why.position == 2 and why.ahead == ("e/urgent",) and "urgent" in why.message
    first = pending_of(urgent, "waiting_for_nodes")
    assert first.position == 1 and first.ahead_count == 0
    assert json.loads(cli("job", "show", *G, "-e", "e", "-n", "urgent"))["schedulingPriority"] == "high"
    _end(exp.get_job("busy"), normal, urgent)
    ws.close()


@pytest.mark.slow
def test_free_nodes_kept_for_the_job_ahead_are_reserved(ws: Workspace) -> None:
    ws.create_cluster("c", nodes=2)
    first = sleeper(ws, "first", "c", max_wall_clock_time=60)
    running(first)
    wide = sleeper(ws, "wide", "c", node_count=2)
    small = sleeper(ws, "small", "c")  # no wall clock limit: it could delay "wide"
    why = pending_of(small, "reserved")
    assert why.position == 2 and why.ahead == ("e/wide",) and "kept for wide" in why.message
    wide_why = pending_of(wide, "waiting_for_nodes")
    assert wide_why.estimated_start is not None  # first's limit ends it by then
    assert first.status.start_time is not None
    expected = first.status.start_time.timestamp() + 60
    assert abs(wide_why.estimated_start.timestamp() - expected) <= 1.0
    _end(first, wide, small)


def _unhealthy_report(ws: Workspace, cluster: str, node: str, why: str) -> None:
    """A report of the admin's own health tool, through the door docs/health.md names (the scheduler signs
    it; a file dropped into health/ is not believed)."""
    doc = {"level": "basic", "nodes": [node], "checks": [], "unusable": {node: why}, "started": time.time()}
    ws.get_cluster(cluster).apply_health_report(doc)


@pytest.mark.slow
def test_a_job_that_needs_a_node_that_failed_the_gate_names_it_and_the_check(ws: Workspace) -> None:
    cluster = ws.create_cluster("c", nodes=2)
    holder = sleeper(ws, "holder", "c", node_count=2)
    running(holder)
    waiting = sleeper(ws, "waiting", "c", node_count=2)
    assert pending_of(waiting, "waiting_for_nodes").estimated_start is None  # holder has no limit
    second = sorted(cluster.node_states())[1]
    why = f"{second} gpu0-ecc uncorrected=3 FAIL"
    _unhealthy_report(ws, "c", second, why)
    found = pending_of(waiting, "nodes_unhealthy")
    assert found.nodes == {second: why}
    assert f"1 of 2 are healthy: {second} failed the health gate" in found.message
    assert found.estimated_start is None
    html = waiting._repr_html_()
    assert "nodes_unhealthy" in html
    assert "nodes_unhealthy" in cluster._repr_html_()
    _end(holder, waiting)


@pytest.mark.slow
def test_a_job_waits_while_its_nodes_are_checked_and_the_cli_asks_for_the_check(
    cli: Callable[..., str], tmp_path: Path
) -> None:
    pytest.importorskip("torch")  # the basic gate's rendezvous check uses torch's gloo
    cli("cluster", "create", *G, "-n", "c", "--target", "2")
    cli("job", "create", *G, "-e", "e", "-n", "gated", "-c", "c", "--nodes", "2", "--command-line", "true",
        "--toolkit", "custom", "--health-check", "basic", "-o", "none")  # fmt: skip
    ws = _cli_workspace(tmp_path)
    job = ws.get_experiment("e").get_job("gated")
    kinds = set()
    named: dict[str, str] = {}
    while job.state is JobState.QUEUED:
        why = job.status.pending
        if why is not None:
            kinds.add(why.kind)
            named = named or dict(why.nodes) if why.kind == "preparing_nodes" else named
        time.sleep(0.05)
    assert "preparing_nodes" in kinds, kinds
    assert sorted(named) == sorted(ws.get_cluster("c").node_states())
    assert set(named.values()) == {"health check running"}
    assert job.wait(timeout=180) is JobState.SUCCEEDED
    assert "health-check.json" in [f.name for f in job.files()]  # --health-check reached the job
    ws.close()


def _cli_workspace(tmp_path: Path) -> Workspace:
    """The workspace the CLI made (a local one under BATCHAI_HOME), opened through the public API."""
    return Workspace.local(root=tmp_path / "home" / "groups" / "rg" / "workspaces" / "ws")


# -- the stream in Python ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_job_stream_yields_why_it_waits_as_status_lines(ws: Workspace) -> None:
    ws.create_cluster("c", nodes=1)
    holder = sleeper(ws, "holder", "c", max_wall_clock_time=3)
    exp = ws.get_experiment("e")
    job = exp.create_job("next", cluster="c", command_line="echo hello", toolkit="custom").submit()
    lines = list(job.stream("stdout.txt", timeout=60))
    status = [line for line in lines if isinstance(line, StatusLine)]
    assert status and status[0].startswith("[batchai] next is queued: waiting_for_nodes (#1 in the queue)")
    assert [line for line in lines if not isinstance(line, StatusLine)] == ["hello"]
    plain = list(job.stream("stdout.txt", status_lines=False))
    assert plain == ["hello"]
    _end(holder)


# -- job create's flags -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_job_create_flags_reach_the_job(cli: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    cli("cluster", "create", *G, "-n", "c", "--target", "1")
    cli("job", "create", *G, "-e", "e", "-n", "retried", "-c", "c", "--command-line", "exit 3",
        "--toolkit", "custom", "--max-retries", "1", "--retry-on-exit-codes", "3,75", "-o", "none")  # fmt: skip
    _, out, _ = run_cli(capsys, "job", "wait", *G, "-e", "e", "-n", "retried", "--interval", "0.2",
                           "--query", "executionState", "-o", "tsv")  # fmt: skip
    assert out == "failed\n"
    attempts = json.loads(cli("job", "show", *G, "-e", "e", "-n", "retried"))["attempts"]
    assert len(attempts) == 2 and {a["exit_code"] for a in attempts} == {3}
    cli("job", "create", *G, "-e", "e", "-n", "silent", "-c", "c", "--command-line", SLEEP,
        "--toolkit", "custom", "--hang-timeout", "2", "--hang-notice", "0", "-o", "none")  # fmt: skip
    run_cli(capsys, "job", "wait", *G, "-e", "e", "-n", "silent", "--interval", "0.2")
    reason = json.loads(cli("job", "show", *G, "-e", "e", "-n", "silent"))["failureReason"]
    assert "possible hang" in reason, reason


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--max-wall-clock-time", "0", "expected a duration > 0"),
        ("--max-wall-clock-time", "soon", "'soon'"),
        ("--hang-timeout", "-5", "expected a duration >= 0"),
        ("--retry-on-exit-codes", "3,300", "an exit code is 1..255, got 300"),
        ("--max-retries", "-1", "expected an integer >= 0"),
        ("--priority", "urgent", "invalid choice: 'urgent'"),
        ("--health-check", "deep", "invalid choice: 'deep'"),
    ],
)
def test_bad_job_create_flags_are_one_line_naming_the_flag(
    cli: Callable[..., str], capsys: pytest.CaptureFixture[str], flag: str, value: str, words: str
) -> None:
    code, _, err = run_cli(capsys, "job", "create", *G, "-e", "e", "-n", "j", "-c", "c",
                           "--command-line", "true", flag, value)  # fmt: skip
    assert code == 2 and flag.split("-")[-1] in err and words in err, err


def test_durations_take_units_and_batch_ai_timespans(cli: Callable[..., str]) -> None:
    from batchai_sdk.cli._job_options import duration

    assert [duration(t) for t in ("90", "90s", "30m", "2h", "1d", "PT1H30M", "1.00:00:00")] == [
        90.0, 90.0, 1800.0, 7200.0, 86400.0, 5400.0, 86400.0,
    ]  # fmt: skip


def test_job_json_batchai_sdk_takes_hang_notice_and_health_check(tmp_path: Path) -> None:
    doc = {
        "properties": {"nodeCount": 1, "customToolkitSettings": {"commandLine": "true"}},
        "batchaiSdk": {"hangNoticeSeconds": 120, "healthCheck": "basic", "maxRetries": 1},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    spec = parse_job_json(path, name="j", experiment="e", cluster="c")
    assert (spec.hang_notice, spec.health_check, spec.max_retries) == (120.0, "basic", 1)
    assert to_job_json(spec)["batchaiSdk"] == {
        "hangNoticeSeconds": 120,
        "maxRetries": 1,
        "healthCheck": "basic",
    }
    doc["batchaiSdk"] = {"healthCheck": "deep"}
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match=r"batchaiSdk\.healthCheck"):
        parse_job_json(path, name="j", experiment="e", cluster="c")


def test_flags_override_the_files_batchai_sdk(cli: Callable[..., str], tmp_path: Path) -> None:
    cli("cluster", "create", *G, "-n", "c", "--target", "1")
    path = tmp_path / "job.json"
    path.write_text(
        textwrap.dedent("""\
        {"properties": {"nodeCount": 1, "schedulingPriority": "low",
                        "customToolkitSettings": {"commandLine": "true"}},
         "batchaiSdk": {"maxRetries": 2}}""")
    )
    shown = json.loads(cli("job", "create", *G, "-e", "e", "-n", "f", "-c", "c", "-f", str(path),
                           "--priority", "high", "--max-wall-clock-time", "2h"))  # fmt: skip
    assert shown["schedulingPriority"] == "high"
    assert shown["constraints"] == {"maxWallClockTime": "PT2H"}


# -- the estimate and the record, as placement and readers see them ---------------------------------------


def test_the_estimate_plays_the_queue_forward_by_the_limits() -> None:
    from batchai_sdk.node.policy.pending import Running, estimate
    from batchai_sdk.node.policy.queue import Waiting

    running = [Running("e/a", 1, 100.0), Running("e/b", 1, 160.0)]  # 2 nodes, both busy
    order = [
        Waiting(1, 2, 50.0),  # both nodes: once b ends, at 160; ends at 210
        Waiting(2, 1, 30.0),  # never before the job ahead: 210 (a node is free from 210)
        Waiting(3, 1, None),  # the other node, also 210; it has no limit
        Waiting(4, 2, 10.0),  # both nodes: behind a job without a limit, unknown
        Waiting(5, 1, 10.0),  # behind it: unknown too
    ]
    assert estimate(order, running, 0) == {1: 160.0, 2: 210.0, 3: 210.0, 4: None, 5: None}
    assert estimate([Waiting(1, 1, 5.0)], running, 1) == {1: 0.0}  # a node free now: no wait


def test_a_pending_record_that_is_not_one_is_left_out() -> None:
    from batchai_sdk.node.protocol.records import NodesDoc, StatusDoc

    doc = NodesDoc.from_dict({"pending": {"e/a": "x", "e/b": {"kind": 3}, "e/c": {"kind": "held"}}})
    assert list(doc.pending) == ["e/c"] and doc.pending["e/c"].message == "held"
    assert NodesDoc.from_dict({"pending": ["e/a"]}).pending == {}
    status = StatusDoc.from_dict({"state": "queued", "pending": {"kind": "quota", "position": "1"}})
    assert status.pending is not None and status.pending.position is None
    assert status.to_dict()["pending"] == {"kind": "quota", "message": "quota"}


def test_a_job_the_cluster_grows_for_says_scaling_up_and_one_it_cannot_grow_for_does_not() -> None:
    """With autoscale a job that needs more nodes than are up waits for the growth (``scaling_up``: on a
    scale set that takes minutes; local and SSH clusters grow within the same pass); beyond max_nodes it
    can never start on the cluster as it is and says so instead."""
    from batchai_sdk.node.policy.pending import NodesNow, explain
    from batchai_sdk.node.policy.queue import Waiting

    nodes = NodesNow(up=("vm_0",), free=("vm_0",), can_grow=2)
    why = explain([("e/big", Waiting(1, 3, None))], [], nodes)["e/big"]
    assert why.kind == "scaling_up" and why.message == "the cluster grows from 1 node(s) for it (it needs 3)"
    assert why.estimated_start is None
    why = explain([("e/huge", Waiting(1, 4, None))], [], nodes)["e/huge"]
    assert why.kind == "waiting_for_nodes" and why.message == "needs 4 node(s); the cluster has 1"
    at_zero = explain([("e/one", Waiting(1, 1, None))], [], NodesNow(up=(), free=()))["e/one"]
    assert at_zero.kind == "cluster_at_zero"
