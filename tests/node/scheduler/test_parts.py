"""The scheduler's parts on their own (node/scheduler/: each owns its state and is given only what it works
with): a real Store on tmp_path, the cluster's configuration as the local backend writes it, real worker
threads, and no daemon, no launcher, no socket but the loop's own wake-up."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _configs import local_cluster_config
from batchai_sdk.node.scheduler.attempt_end import AttemptEnds
from batchai_sdk.node.scheduler.cluster import Cluster
from batchai_sdk.node.scheduler.gate import NodeGate
from batchai_sdk.node.scheduler.health import DownNodes, HangWatch
from batchai_sdk.node.scheduler.scaling import AutoScaler
from batchai_sdk.node.scheduler.server import RequestServer
from batchai_sdk.node.scheduler.store import Store


@pytest.fixture
def threads() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def _cluster(tmp_path: Path, nodes: int = 2, **extra: Any) -> tuple[Store, Cluster, dict[str, Any]]:
    """A head node's state folder holding ``cluster.json`` as the last request left it."""
    state = tmp_path / "state"
    state.mkdir()
    cfg = {**local_cluster_config(tmp_path / "share", nodes), **extra}
    Path(cfg["cluster_dir"]).mkdir(parents=True)
    (state / "cluster.json").write_text(json.dumps(cfg))
    store = Store(str(state))
    return store, Cluster(store), cfg


def _queue(store: Store, name: str, node_count: int) -> None:
    store.add_job(experiment="e", name=name, node_count=node_count, request_id=name, request_digest="")


def test_autoscale_grows_toward_the_queue_and_a_new_configuration_drops_what_left_the_pool(
    tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    store, cluster, cfg = _cluster(tmp_path, nodes=1, autoscale={"min_nodes": 1, "max_nodes": 3})
    cfg["pool"] = [{**cfg["nodes"][0], "id": f"n{i}"} for i in range(3)]
    assert cluster.configure(cfg) and not cluster.configure(dict(cfg))  # the same one again: no change
    assert json.loads((tmp_path / "state" / "cluster.json").read_text())["pool"] == cfg["pool"]
    assert [n["id"] for n in cluster.nodes()] == ["n0"] and cluster.capacity() == 3
    scaler = AutoScaler(cluster, store, NodeGate(cluster, threads), threads)
    _queue(store, "two", 2)
    scaler.tick()
    assert [n["id"] for n in cluster.nodes()] == ["n0", "n1"]  # grown for the queued 2-node job
    cluster_dir = Path(cfg["cluster_dir"])
    assert json.loads((cluster_dir / "size.json").read_text())["nodes"] == ["n0", "n1"]
    [event] = [json.loads(line) for line in (cluster_dir / "events.jsonl").read_text().splitlines()]
    assert (event["from"], event["to"]) == (1, 2)
    # the pool loses n1 (the cluster's nodes were edited): it is no longer up, n0 stays
    assert cluster.configure({**cfg, "pool": [cfg["pool"][0], cfg["pool"][2]]})
    assert [n["id"] for n in cluster.nodes()] == ["n0"]
    assert cluster.configure(cfg)  # back in the pool, n1 is up again only when autoscale grows to it
    assert [n["id"] for n in cluster.nodes()] == ["n0"]


def test_a_down_node_takes_jobs_again_only_once_every_job_it_owes_is_ended(
    tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    store, cluster, _ = _cluster(tmp_path)
    down = DownNodes(cluster, store, threads)
    down.mark("n1")
    down.unreached("n1", "job-a")  # job a ended while n1 did not answer: it may still run there
    assert "n1" in down and down.ids() == ["n1"] and down.busy()
    down.since["n1"] -= 3  # found down 3 s ago: the next pass probes it
    down.probe()
    probe = down.probes["n1"]
    down.unreached("n1", "job-b")  # another job's cleanup missed n1 while the probe ran
    probe.result(timeout=30)
    down.probe()
    assert "n1" in down and down.owes("n1", "job-b") and not down.owes("n1", "job-a")
    down.since["n1"] -= 3
    down.probe()
    down.probes["n1"].result(timeout=30)
    down.probe()
    assert "n1" not in down and not down.busy() and not down.owes("n1", "job-b")


def test_a_finished_cleanup_wakes_the_loop_at_once(
    tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    """The loop waits for requests up to its tick; a cleanup that finishes meanwhile ends that wait, so
    the freed nodes are handed on without waiting for the tick."""
    store, cluster, _ = _cluster(tmp_path)
    down = DownNodes(cluster, store, threads)
    ends = AttemptEnds(store, cluster, threads, down, HangWatch(cluster, store, threads, lambda *_: None))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "sock"))
    listener.listen()
    server = RequestServer(listener, lambda _: {})
    ends.wake = server.wake
    waited = threading.Event()

    def loop() -> None:
        server.poll(120)  # no request comes: only the wake ends it before its timeout
        waited.set()

    try:
        ends.start_cleaning(1, os.urandom(8).hex(), ["n0"])  # nothing of that tag runs: done at once
        waiter = threading.Thread(target=loop, daemon=True)
        waiter.start()
        assert waited.wait(60), "the finished cleanup did not wake the loop"
        assert ends.cleaning[1].result(timeout=30) == 0
    finally:
        server.shutdown()
        listener.close()
    server.wake()  # a cleanup that finishes once the loop ended is no error
