"""A cluster's mounts on the SSH backend, for real: an unmanaged file system (sshfs, a FUSE mount, against the
sshd nodes themselves) is mounted by node setup on every node and a job reads and writes through it; a kind the
nodes cannot mount (NFS: no kernel client here) must already be there, else the job is refused naming node
and path. The exact command lines of the rest are tested in test_ssh_mount_script.py."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from batchai_sdk import FileServer, JobState, UnmanagedFileSystem, ValidationError, Workspace
from batchai_sdk.exceptions import NodeError

pytestmark = [pytest.mark.ssh, pytest.mark.mpi]
HOSTS = NODE_ADDRESSES[:2]


def _fuse_works() -> bool:
    return shutil.which("sshfs") is not None and Path("/dev/fuse").exists()


@pytest.fixture
def lab(ssh_nodes: SSHNodes, tmp_path: Path) -> Iterator[Workspace]:
    (tmp_path / "mnt" / "share").mkdir(parents=True)
    ws = ssh_nodes.workspace("lab", tmp_path, HOSTS)
    yield ws
    ws.close()
    # FUSE mounts outlive the test's processes
    for point in [*(tmp_path / "mnt").iterdir(), *(tmp_path / "node_state").glob("storage/*/*")]:
        subprocess.run(["fusermount3", "-u", "-z", str(point)], capture_output=True)


def sshfs_command(nodes: SSHNodes, tmp_path: Path, exported: Path) -> str:
    known = tmp_path / "sshfs_known_hosts"
    known.write_text(nodes.known_hosts_text())
    options = f"IdentityFile={nodes.key_file},UserKnownHostsFile={known},BatchMode=yes"
    return f"sshfs -p {nodes.port} -o {options} {nodes.user}@{NODE_ADDRESSES[2]}:{exported}"


@pytest.mark.skipif(not _fuse_works(), reason="needs sshfs and /dev/fuse (apt-get install sshfs)")
def test_node_setup_mounts_an_unmanaged_file_system_and_the_job_uses_it(
    lab: Workspace, ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / "in.txt").write_text("from the file server\n")
    remote = UnmanagedFileSystem("remote", mount_command=sshfs_command(ssh_nodes, tmp_path, exported))
    cluster = lab.create_cluster("c", nodes=2, mounts=[remote])
    job = lab.create_experiment("e").create_job(
        "j",
        cluster=cluster,
        node_count=2,
        toolkit="custommpi",
        command_line="cp $AZ_BATCHAI_MOUNT_ROOT/remote/in.txt $AZ_BATCHAI_MOUNT_ROOT/remote/out-$OMPI_COMM_WORLD_RANK.txt",
    )
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    # the ranks wrote through the mount: the files are on the exported folder, not in the mount point
    assert sorted(p.name for p in exported.iterdir()) == ["in.txt", "out-0.txt", "out-1.txt"]
    assert (exported / "out-1.txt").read_text() == "from the file server\n"
    assert subprocess.run(["mountpoint", "-q", str(tmp_path / "mnt" / "remote")]).returncode == 0
    # a job's own mount: mounted on its nodes under the node-local storage root, linked at its job mount root
    own = exported / "own"
    own.mkdir()
    data = UnmanagedFileSystem("data", mount_command=sshfs_command(ssh_nodes, tmp_path, own))
    job = lab.get_experiment("e").create_job(
        "k", cluster=cluster, node_count=2, toolkit="custommpi", mounts=[data],
        command_line="echo $OMPI_COMM_WORLD_RANK > $AZ_BATCHAI_JOB_MOUNT_ROOT/data/rank-$OMPI_COMM_WORLD_RANK",
    )  # fmt: skip
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    assert sorted(p.name for p in own.iterdir()) == ["rank-0", "rank-1"]


def test_a_mount_the_nodes_cannot_make_refuses_the_job_naming_node_and_path(
    lab: Workspace, tmp_path: Path
) -> None:
    nfs = FileServer("nfs", server="198.51.100.7")  # no NFS client in this kernel: only a check is possible
    cluster = lab.create_cluster("c", nodes=2, mounts=[nfs])
    exp = lab.create_experiment("e")
    job = exp.create_job("j", cluster=cluster, toolkit="custommpi", command_line="true")
    with pytest.raises(NodeError) as info:
        job.submit()
    where = tmp_path / "mnt" / "nfs"
    for node in info.value.failures:
        assert f"{where} is not there and was not mounted" in info.value.failures[node]
    assert len(info.value.failures) == 2
    assert not where.exists()  # nothing half-made left behind
    # an admin-provided folder at the path passes the check
    where.mkdir()
    job = exp.create_job("k", cluster=cluster, toolkit="custommpi", command_line="true")
    job.submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason


def test_an_undeclared_cluster_mount_is_refused_naming_the_clusters_mounts(lab: Workspace) -> None:
    cluster = lab.create_cluster("c", nodes=1, mounts=[FileServer("nfs", server="198.51.100.7")])
    with pytest.raises(ValidationError) as info:
        lab.create_experiment("e").create_job(
            "j", cluster=cluster, toolkit="custommpi", command_line="ls $AZ_BATCHAI_MOUNT_ROOT/autoafs/logs"
        )
    assert info.value.field == "command_line"
    assert "its mounts: nfs" in str(info.value) and "$AZ_BATCHAI_MOUNT_ROOT/autoafs" in str(info.value)
