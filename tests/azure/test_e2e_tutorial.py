"""The tutorial through the Azure code path, end to end.

ARM is the fake (the real azure-mgmt clients talk to it over HTTP); its scale-set instances are sshd
"VMs" on loopback addresses, provisioned with the workspace's SSH key from the scale set's osProfile, and
their run-command answers each sshd's real host key, which the backend pins before any SSH connection.
The Azure file share is the fake Files API over the directory those nodes see as their mount. The job
then runs as on Azure: SSH to the head node, mpirun across the nodes, Horovod, real training; its model
is downloaded through the ShareClient.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import responses
from sshd_vms import start_vms, workspace_on_sshd_vms

from batchai_sdk._models import ClusterState, JobState, NodeCounts
from batchai_sdk.train import module_path

sys.path.insert(0, str(Path(__file__).parents[1] / "ssh"))
from sshd import SSHNodes

pytestmark = [pytest.mark.ssh, pytest.mark.mpi, pytest.mark.train]

ADDRESSES = ["127.0.0.2", "127.0.0.3"]


@pytest.fixture(scope="module")
def vms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHNodes]:
    """Two sshd "VMs" (sshd_vms.start_vms), for a Horovod job."""
    missing = [m for m in ("tensorflow", "horovod") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the train extra (missing: {', '.join(missing)})")
    yield from start_vms(tmp_path_factory.mktemp("azure_vms"), ADDRESSES)


def test_tutorial_on_the_azure_backend(vms: SSHNodes, tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"  # AZ_BATCHAI_MOUNT_ROOT on the "VMs"
    resolved: list[str] = []
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        ws, arm, files = workspace_on_sshd_vms(mock, vms, ADDRESSES, tmp_path, resolved=resolved)
        try:
            exp = ws.create_experiment("cifar")
            cluster = ws.create_cluster(
                "nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2, vm_priority="dedicated"
            )
            assert cluster.state is ClusterState.RESIZING
            cluster.wait_until_steady(timeout=30, poll_interval=0.1)
            assert cluster.node_counts == NodeCounts(idle=2)

            # the tutorial uploads its script to the share: here through the Files API
            script = tmp_path / "cifar_cnn_distributed.py"
            shutil.copy(module_path("cifar10"), script)
            ws.share.upload(script, "cifar/cifar_cnn_distributed.py")
            assert (mounts / "batchaishare" / "cifar" / "cifar_cnn_distributed.py").exists()

            job = exp.create_job(
                "cifar_distributed",
                cluster=cluster,
                node_count=2,
                python_script="$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar/cifar_cnn_distributed.py",
                args=["--dir", "$AZ_BATCHAI_JOB_MOUNT_ROOT/cifar", "--dataset", "digits", "--epochs", "2",
                      "--seed", "1"],
            )  # fmt: skip
            started = time.monotonic()
            job.submit()
            # host keys came through ARM's run-command before the first SSH connection
            known = (tmp_path / "client_state" / "known_hosts").read_text()
            for address in ADDRESSES:
                line = vms.nodes[address].host_key_line().strip()
                assert line in known
            assert arm.count("POST", r"/runCommand$") == 2
            assert resolved and set(resolved) <= {"nc6cluster_0", "nc6cluster_1"}

            lines = list(job.stream("stdout.txt", poll_interval=0.5, timeout=300))
            assert job.wait(timeout=60, poll_interval=0.5) is JobState.SUCCEEDED, job.tail("stderr.txt", 40)
            print(f"azure e2e job: {time.monotonic() - started:.1f}s", file=sys.stderr)
            text = "\n".join(lines)
            assert "Epoch 2/2" in text and "Saved trained model" in text
            names = {f.name for f in job.files()}
            assert {
                "stdout.txt",
                "stderr.txt",
                "execution-nc6cluster_0.log",
                "execution-nc6cluster_1.log",
            } <= names
            assert files.counters.ranged_get_bytes > 0  # the stream read the log through ranged GETs

            model = ws.share.download(
                "cifar/saved_models/keras_cifar10_trained_model.h5", tmp_path / "model.h5"
            )
            assert model.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n"
            assert files.counters.unauthorized == []

            cluster.resize(0, wait=True, timeout=30)
            assert cluster.node_counts == NodeCounts()
        finally:
            ws.delete(force=True)
        assert "batchai.horovod" not in arm.groups and arm.resources == {}
