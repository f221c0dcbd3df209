"""The health gate across a cluster's nodes (node/gate/run.py, ``__main__ gate run``): the real gloo
all-reduce between two nodes measured, and a node that cannot run the check named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from batchai_sdk import HealthReport
from batchai_sdk.node.gate import checks

NODE_MAIN = Path(checks.__file__).parent.parent / "__main__.py"


def _gate(nodes: list[dict[str, str]], level: str) -> dict[str, object]:
    request = {
        "cluster": {"ssh_command": None, "python": sys.executable, "node_main": str(NODE_MAIN), "health": {}},
        "nodes": nodes,
        "level": level,
    }
    done = subprocess.run(
        [sys.executable, "-S", str(NODE_MAIN), "gate", "run"],
        input=json.dumps(request), capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.slow
def test_gloo_all_reduce_between_two_nodes_is_measured() -> None:
    pytest.importorskip("torch")
    nodes = [{"id": "n0", "address": "127.0.0.1"}, {"id": "n1", "address": "127.0.0.1"}]
    report = HealthReport.from_dict(_gate(nodes, "full"))
    by_name = {(c.node, c.name): c for c in report.checks}
    assert set(by_name) == {
        ("n0", "rendezvous"), ("n1", "rendezvous"),  # basic's rows stay in full's report
        ("n0", "allreduce"), ("n1", "allreduce"), ("n0<->n1", "link-allreduce"),
    }  # fmt: skip
    link = by_name[("n0<->n1", "link-allreduce")]
    assert link.ok and float(link.detail.removeprefix("busbw=").removesuffix("GB/s")) > 0
    assert report.nodes == ("n0", "n1") and report.seconds > 0


def test_a_node_that_cannot_run_the_check_is_named() -> None:
    nodes = [{"id": "n0", "address": "127.0.0.1"}]
    request = {
        "cluster": {"ssh_command": None, "python": "/nonexistent/python3", "node_main": str(NODE_MAIN)},
        "nodes": nodes,
        "level": "basic",
    }
    done = subprocess.run(
        [sys.executable, "-S", str(NODE_MAIN), "gate", "run"],
        input=json.dumps(request), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["unusable"]["n0"].startswith("n0 reachable 127.0.0.1: ")
    assert report["unusable"]["n0"].endswith(" FAIL")
