"""An Azure cluster with autoscale at 0 nodes grows for a submitted job, through the real code path.

ARM is the fake (the real azure-mgmt clients talk to it over HTTP); its scale-set instances are sshd "VMs"
on loopback addresses that accept the keys of the scale set's osProfile, and run-command answers each
sshd's real host key. The job then runs as on Azure: SSH to the head node, mpirun across both nodes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import responses
from sshd_vms import start_vms, workspace_on_sshd_vms

from batchai_sdk import CapacityError
from batchai_sdk._models import JobState

sys.path.insert(0, str(Path(__file__).parents[1] / "ssh"))
from sshd import SSHNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]

ADDRESSES = ["127.0.0.2", "127.0.0.3"]
SCRIPT = "import os\nprint('rank', os.environ['AZ_BATCHAI_TASK_INDEX'], 'ran', flush=True)\n"


@pytest.fixture(scope="module")
def vms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHNodes]:
    """Two sshd "VMs" (sshd_vms.start_vms)."""
    yield from start_vms(tmp_path_factory.mktemp("azure_grow_vms"), ADDRESSES)


def test_a_job_grows_an_autoscale_scale_set_at_submit(vms: SSHNodes, tmp_path: Path) -> None:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        ws, arm, _ = workspace_on_sshd_vms(mock, vms, ADDRESSES, tmp_path)
        try:
            exp = ws.create_experiment("e")
            # the idle limit is long: the head node must not call the metadata service during the test
            cluster = ws.create_cluster(
                "auto", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=2,
                idle_seconds_before_scaledown=3600,
            )  # fmt: skip
            assert cluster.nodes_up == 0 and arm.count("POST", r"/runCommand$") == 0
            script = tmp_path / "hello.py"
            script.write_text(SCRIPT)

            patches = arm.count("PATCH", r"virtualMachineScaleSets/[^/]+$")
            with pytest.raises(CapacityError, match="'auto' has 2"):  # more than max_nodes
                exp.create_job("big", cluster=cluster, node_count=3, python_script=str(script))
            assert arm.count("PATCH", r"virtualMachineScaleSets/[^/]+$") == patches  # nothing grew

            job = exp.create_job("two", cluster=cluster, node_count=2, python_script=str(script))
            job.submit()  # grows the scale set 0 -> 2, pins the new VMs' host keys, then queues
            assert cluster.nodes_up == 2
            assert arm.count("POST", r"/runCommand$") == 2  # each new VM's host key, through ARM
            grown = [e for e in cluster.events() if e.get("reason") == "job e/two submitted"]
            assert [(e["from"], e["to"]) for e in grown] == [(0, 2)]
            assert job.wait(timeout=120, poll_interval=0.5) is JobState.SUCCEEDED, job.tail("stderr.txt", 40)
            out = "\n".join(job.tail("stdout.txt", 10))
            assert "rank 0 ran" in out and "rank 1 ran" in out
            assert {f.name for f in job.files()} >= {"execution-auto_0.log", "execution-auto_1.log"}

            again = exp.create_job("again", cluster=cluster, node_count=1, python_script=str(script))
            again.submit()  # enough nodes are up: no second growth
            assert again.wait(timeout=120, poll_interval=0.5) is JobState.SUCCEEDED
            assert len([e for e in cluster.events() if "submitted" in str(e.get("reason"))]) == 1
        finally:
            ws.delete(force=True)
