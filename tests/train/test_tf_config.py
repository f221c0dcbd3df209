"""TF_CONFIG from node/policy/toolkits.py drives tf.distribute.MultiWorkerMirroredStrategy on the pinned TF 2.15:
two real worker processes on loopback agree on an all-reduce."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from batchai_sdk.node.job.launcher import free_port
from batchai_sdk.node.policy.toolkits import RankContext, rank_argv, rank_env

pytestmark = pytest.mark.train

WORKER = """
import os, sys, json
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
value = strategy.run(lambda: tf.constant(float(task["index"] + 1)))
total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
print(f"{os.environ['AZ_BATCHAI_TF_ROLE']} {sys.argv[1:]} replicas={strategy.num_replicas_in_sync} sum={float(total)}")
"""


def test_two_workers_agree_through_tf_config(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = free_port(2)
    settings = {"worker_count": 2, "master_args": ["--master"], "worker_args": ["--worker"]}
    procs = []
    for rank in range(2):
        ctx = RankContext(
            toolkit="tensorflow", settings=settings, rank=rank, world_size=2, local_rank=rank,
            local_world_size=2, node_rank=0, node_count=1, node_addresses=["127.0.0.1"], master_port=port,
            python=sys.executable, script=str(script), args=[],
        )  # fmt: skip
        env = {**os.environ, **rank_env(ctx)}
        procs.append(
            subprocess.Popen(
                rank_argv(ctx), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    assert [r[0] for r in results] == [0, 0], results
    assert results[0][1].splitlines()[-1] == "master ['--master'] replicas=2 sum=3.0"
    assert results[1][1].splitlines()[-1] == "worker ['--worker'] replicas=2 sum=3.0"
