"""The SFTP share does not follow symbolic links out of the share (a job can plant them on the share),
and a job's handle does not follow links out of the job's folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sshd import NODE_ADDRESSES, SSHNodes

from _links import PLANT_LINKS, check_links_not_followed
from batchai_sdk import JobState
from batchai_sdk.exceptions import ValidationError

pytestmark = pytest.mark.ssh


def test_sftp_download_and_delete_do_not_follow_links_out_of_the_share(
    ssh_nodes: SSHNodes, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    share_dir = root / "mnt" / "share"
    share_dir.mkdir(parents=True)
    outside = tmp_path / "outside"
    (outside / "OUT").mkdir(parents=True)
    (outside / "secret.txt").write_text("OUTSIDE\n")
    (outside / "OUT" / "precious.txt").write_text("OUTSIDE\n")
    out = share_dir / "jobs" / "j" / "outputs"
    out.mkdir(parents=True)
    (out / "real.txt").write_text("mine\n")
    os.symlink(outside / "secret.txt", out / "file_link")
    os.symlink(outside, out / "dir_link")
    os.symlink(tmp_path / "missing", out / "dangling")
    (share_dir / "inside.txt").write_text("inside\n")
    os.symlink(share_dir / "inside.txt", out / "inside_link")  # a link within the share is followed
    os.symlink(outside, share_dir / "jobs" / "swapped")  # a folder swapped for a link out of the share
    ws = ssh_nodes.workspace("links", root, NODE_ADDRESSES[:1])
    try:
        share = ws.share
        dest = tmp_path / "dl"
        dest.mkdir()
        got = share.download("jobs/j/outputs", dest)
        assert sorted(p.name for p in got.iterdir()) == ["inside_link", "real.txt"]
        assert (got / "inside_link").read_text() == "inside\n"
        for path in ("jobs/j/outputs/file_link", "jobs/j/outputs/dir_link", "jobs/swapped/OUT/precious.txt"):
            with pytest.raises(ValidationError):
                share.download(path, tmp_path / "x")
        assert not (tmp_path / "x").exists()
        share.delete("jobs/swapped/OUT", recursive=True)
        share.delete("jobs/swapped/secret.txt")
        share.delete("jobs/j", recursive=True)
        assert (outside / "OUT" / "precious.txt").read_text() == "OUTSIDE\n"
        assert (outside / "secret.txt").read_text() == "OUTSIDE\n"
        assert not (share_dir / "jobs" / "j").exists() and (share_dir / "inside.txt").exists()
    finally:
        ws.close()


def test_job_files_over_sftp_refuse_links_out_of_the_job_folders(ssh_nodes: SSHNodes, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "mnt" / "share").mkdir(parents=True)
    ws = ssh_nodes.workspace("joblinks", root, NODE_ADDRESSES[:1])
    try:
        cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
        job = (
            ws.create_experiment("e").create_job("links", cluster=cluster, command_line=PLANT_LINKS).submit()
        )
        assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
        check_links_not_followed(job)
    finally:
        ws.close()
