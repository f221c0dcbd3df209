"""A job's handle reads only the job's own files: links a job planted in its folders are not followed."""

from __future__ import annotations

from _links import PLANT_LINKS, check_links_not_followed
from batchai_sdk import JobState, Workspace


def test_tail_stream_files_refuse_links_out_of_the_job_folders(ws: Workspace) -> None:
    exp = ws.create_experiment("e")
    cluster = ws.create_cluster("c", vm_size="Standard_NC6", nodes=1)
    job = exp.create_job("links", cluster=cluster, command_line=PLANT_LINKS).submit()
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.status.failure_reason
    check_links_not_followed(job)
