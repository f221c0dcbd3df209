"""A job that plants symbolic links in its own log folder, and the check that a job's handle reads only the
job's own files through them."""

from __future__ import annotations

# A job that plants symbolic links in its own log folder: out of the share, to a folder of the share that
# is not the job's, and one within its logs (which readers follow).
PLANT_LINKS = (
    'cd "$AZ_BATCHAI_STDOUTERR_DIR" && ln -s /etc/passwd passwd.txt && ln -s /etc etc'
    ' && ln -s "$(dirname "$PWD")" parent && ln -s stdout.txt again.txt && echo hello'
)


def check_links_not_followed(job: object) -> None:
    """``tail``, ``stream``, ``files`` and ``download`` of a job that ran PLANT_LINKS read only its own
    files: links out of its folders are refused by name or left out of listings."""
    import pytest

    from batchai_sdk.exceptions import ValidationError
    from batchai_sdk.job import Job

    assert isinstance(job, Job)
    names = [f.name for f in job.files()]
    assert "stdout.txt" in names and "again.txt" in names
    assert not {"passwd.txt", "etc", "parent"} & set(names)
    assert job.tail("again.txt") == ["hello"]
    for name in ("passwd.txt", "etc/passwd", "parent/job.json"):
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.tail(name)
        with pytest.raises(ValidationError, match="leads out through a link"):
            list(job.stream(name, follow=False))
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.download(name, "/nonexistent-dest")
    for folder in ("etc", "parent"):
        with pytest.raises(ValidationError, match="leads out through a link"):
            job.files(folder)
