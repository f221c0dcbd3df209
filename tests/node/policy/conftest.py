"""Fixtures of the policy room's tests with real jobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from batchai_sdk import Job


@pytest.fixture
def cleanup() -> Iterator[list[Job]]:
    """The jobs a test started; any still running when it ends (a failed assertion) is terminated."""
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        if not job.state.ended:
            job.terminate()
