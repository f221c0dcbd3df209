"""Why a job waits when a node stops answering, on real sshd nodes (127.0.0.2 head, 127.0.0.3): the
queued job's pending reason names the node that is down."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes
from test_ssh_scheduler import comm, descendants

from _labs import scheduler_states, ssh_lab
from _procs import wait_for
from batchai_sdk import JobState, Workspace

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

HEAD, SECOND = NODE_ADDRESSES[0], NODE_ADDRESSES[1]

QUIET = """
import os, sys, time
open(os.path.join(sys.argv[1], "up-" + os.environ["OMPI_COMM_WORLD_RANK"]), "w").close()
time.sleep(300)
"""


lab = ssh_lab([HEAD, SECOND], "pending")


def test_a_job_that_needs_a_node_that_stopped_answering_names_it(
    lab: Workspace, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    ws, sched_root = lab, scheduler_states(lab)
    exp = ws.create_experiment("d")
    cluster = ws.create_cluster("d", vm_size="Standard_NC4as_T4_v3", nodes=2)
    out = tmp_path / "out"
    out.mkdir()
    quiet = tmp_path / "quiet.py"
    quiet.write_text(textwrap.dedent(QUIET))
    # the hang watch finds the stopped node when it collects the stacks: after 8 s of silence, time
    # enough to stop the node first on a loaded machine (with 3 s the job could end as a plain hang)
    holder = exp.create_job("holder", cluster=cluster, node_count=2, hang_timeout=8,
                            command_line=f"{sys.executable} {quiet} {out}").submit()  # fmt: skip
    waiting = exp.create_job("waiting", cluster=cluster, node_count=2, command_line="true").submit()
    wait_for(lambda: len(list(out.glob("up-*"))) == 2, 60, "both ranks to run")
    sshd = ssh_nodes.nodes[SECOND].process
    assert sshd is not None
    frozen = [sshd.pid, *(p for p in descendants(sshd.pid) if not comm(p).startswith(("bash", "pyenv")))]
    log = sched_root / "d" / "scheduler.log"
    kinds = []
    try:
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: f"node {SECOND} stopped answering" in log.read_text(), 60, "the stopped node named")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            why = waiting.status.pending
            kinds.append(why.kind if why else None)
            if why is not None and why.kind == "nodes_down":
                assert why.nodes == {SECOND: "stopped answering"}
                assert f"{SECOND} stopped answering" in why.message
                break
            time.sleep(0.2)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert "nodes_down" in kinds, kinds
    assert holder.wait(timeout=90, poll_interval=0.2) is JobState.FAILED
    assert waiting.wait(timeout=120, poll_interval=0.2) is JobState.SUCCEEDED  # once the node answers
