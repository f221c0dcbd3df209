"""What the SSH tests on namespace nodes share besides their fixtures (conftest.py): a job whose ranks
say where they run and then sleep, and the check that mended nodes take a job again."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
import time
from pathlib import Path

from _procs import wait_for
from batchai_sdk import JobState
from batchai_sdk._models import NodeCounts
from batchai_sdk.cluster import Cluster
from batchai_sdk.experiment import Experiment
from batchai_sdk.job import Job
from nsnodes import NSNodes

# A rank that says where it runs (hostname, its pid as its node numbers it, its job's tag), then sleeps;
# on SIGTERM it checkpoints; on a later attempt it says it is back and ends.
SLEEPER = """
import json, os, signal, socket, sys, time
rank = os.environ["OMPI_COMM_WORLD_RANK"]
host = socket.gethostname()
if os.environ.get("AZ_BATCHAI_JOB_RESTART_COUNT", "0") != "0":
    print(f"rank {rank} back on {host}", flush=True)
    sys.exit(0)
def checkpoint(signum, frame):
    print(f"rank {rank} checkpointed on {host}", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, checkpoint)
path = os.path.join(sys.argv[1], f"rank-{rank}.json")
with open(path + ".tmp", "w") as f:
    f.write(json.dumps({"host": host, "pid": os.getpid(), "tag": os.environ["BATCHAI_JOB_TAG"]}))
os.rename(path + ".tmp", path)
time.sleep(600)
"""

STARTED: list[Job] = []  # jobs a test started: ended by the next mending if the test failed midway


def sleeper_job(
    exp: Experiment, cluster: Cluster, name: str, out: Path, **options: object
) -> tuple[Job, dict[int, dict[str, object]]]:
    """A 2-node job of SLEEPER ranks; returns it once both ranks run, with what each rank said."""
    out.mkdir(exist_ok=True)
    script = out / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER))
    job = exp.create_job(
        name,
        cluster=cluster,
        node_count=2,
        command_line=f"{shlex.quote(sys.executable)} {script} {out}",
        **options,
    ).submit()
    STARTED.append(job)
    wait_for(
        lambda: len(list(out.glob("rank-*.json"))) == 2 or job.state.ended,
        timeout=90,
        what=f"both ranks of {name} to run",
    )
    assert not job.state.ended, job.status.failure_reason
    return job, {r: json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)}


def heal_and_rerun(
    ns_nodes: NSNodes, exp: Experiment, cluster: Cluster, name: str, lost_tag: str
) -> tuple[float, float]:
    """Mend the nodes; then both count idle again, nothing of the lost job is left on node2, and a
    2-node job runs on both. Returns the seconds from the heal until node2 was idle and until the first
    submit after it was accepted."""
    healed = time.monotonic()
    ns_nodes.heal_all()
    wait_for(lambda: cluster.node_counts == NodeCounts(idle=2), timeout=60, what="node2 to answer again")
    usable = time.monotonic() - healed
    # a node counts as free only when empty: nothing of the job cut off from it survived there
    assert ns_nodes["node2"].tagged(lost_tag) == {}, "the lost job's rank outlived the partition on node2"
    again = exp.create_job(name, cluster=cluster, node_count=2, command_line="hostname")
    again.submit()  # the first submit after the heal: the client's connection to node2 must not be stale
    submitted = time.monotonic() - healed
    STARTED.append(again)
    assert again.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED, again.status.failure_reason
    assert sorted(again.tail("stdout.txt")) == ["node1", "node2"]
    return usable, submitted
