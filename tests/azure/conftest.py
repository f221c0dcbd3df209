"""Fixtures for the Azure tests: the real SDK clients against fakes of ARM and Azure Files (``responses``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import ACCOUNT, SUBSCRIPTION, FakeCredential, backend_options
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk.backends.azure import AzureBackend


@pytest.fixture
def credential() -> FakeCredential:
    return FakeCredential()


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as m:
        yield m


@pytest.fixture
def arm(mock: responses.RequestsMock) -> Iterator[FakeArm]:
    fake = FakeArm(SUBSCRIPTION)
    fake.register(mock)
    yield fake
    # a body the spec refuses fails the test even where the code under test swallowed the 400
    assert fake.invalid_bodies == [], fake.invalid_bodies


@pytest.fixture
def files(mock: responses.RequestsMock, tmp_path: Path) -> FakeFilesService:
    fake = FakeFilesService(tmp_path / "files", ACCOUNT)
    fake.register(mock)
    return fake


@pytest.fixture
def make_backend(
    arm: FakeArm, files: FakeFilesService, credential: FakeCredential, tmp_path: Path
) -> Iterator[Callable[..., AzureBackend]]:
    made: list[AzureBackend] = []

    def make(**overrides: Any) -> AzureBackend:
        backend = AzureBackend("batchaidev", **{**backend_options(tmp_path, credential), **overrides})
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()
