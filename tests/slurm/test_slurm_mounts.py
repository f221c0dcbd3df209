"""Mounts on the Slurm backend: the site mounts storage, we mount nothing. A cluster's mounts must be folders
at ``<mount root>/<relative_mount_path>`` as the login node sees them (here: this machine, a LocalRunner),
else the job is refused naming the login node and the paths; a job's own mount of storage the cluster does
not mount is refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchai_sdk import AzureFileShare, FileServer, ValidationError
from batchai_sdk._models import ClusterSpec, Node
from batchai_sdk.backends.slurm.backend import SlurmBackend, check_mount_paths
from batchai_sdk.exceptions import NodeError
from batchai_sdk.remote.local import LocalRunner

MOUNTS = (AzureFileShare("afs", "acct", "logs"), FileServer("nfs", server="10.0.0.4"))


def test_a_cluster_mount_must_be_an_exported_path_on_the_nodes(tmp_path: Path) -> None:
    spec = ClusterSpec(name="gpu", vm_size="slurm", nodes=2, mounts=MOUNTS)
    (tmp_path / "afs").mkdir()
    with pytest.raises(NodeError) as info:
        check_mount_paths(LocalRunner("login"), spec, str(tmp_path))
    assert info.value.failures == {"login": f"not there: {tmp_path}/nfs"}
    assert "the site mounts storage" in str(info.value)
    (tmp_path / "nfs").mkdir()
    check_mount_paths(LocalRunner("login"), spec, str(tmp_path))  # both there: no error


def test_a_job_mount_of_storage_the_cluster_does_not_mount_is_refused(tmp_path: Path) -> None:
    backend = SlurmBackend("hpc", share_path=str(tmp_path / "share"))  # this machine is the login node
    spec = ClusterSpec(name="gpu", vm_size="slurm", nodes=1, mounts=MOUNTS[:1])
    node = (Node(id="n1", address="n1", machine="n1"),)
    backend.prepare_job_mounts(spec, node, [AzureFileShare("logs", "acct", "logs")])  # the cluster's: linked
    with pytest.raises(ValidationError) as info:
        backend.prepare_job_mounts(spec, node, MOUNTS)
    assert "slurm backend mounts nothing per job" in str(info.value)
    assert info.value.field == "mounts[1]" and "NFS 10.0.0.4:/data" in str(info.value)
