"""``Workspace.azure(...)`` makes no Azure call until one is needed, and a refused cluster creates nothing:
the real SDK clients against the fake ARM and Files services (``responses``), counting every request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import responses
from azure_helpers import FakeCredential, backend_options
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk import AzureQuotaError, NotFoundError, ValidationError, Workspace


@pytest.fixture
def ws(
    mock: responses.RequestsMock,
    arm: FakeArm,
    files: FakeFilesService,
    credential: FakeCredential,
    tmp_path: Path,
) -> Iterator[Workspace]:
    """``Workspace.azure(...)`` with the fakes of ARM and Azure Files registered (nothing asked yet)."""
    workspace = Workspace.azure("batchaidev", **backend_options(tmp_path, credential))
    yield workspace
    workspace.close()


def test_constructing_the_workspace_makes_no_request(
    ws: Workspace, mock: responses.RequestsMock, credential: FakeCredential
) -> None:
    assert repr(ws) == "Workspace('batchaidev', backend='azure')"
    assert ws.to_dict()["resource_group"] == "batchai.horovod"
    assert len(mock.calls) == 0 and credential.scopes == []  # not even a token was asked for


def test_a_refused_cluster_creates_nothing(
    ws: Workspace, mock: responses.RequestsMock, arm: FakeArm, files: FakeFilesService
) -> None:
    with pytest.raises(ValidationError, match="Standard_NC6"):  # retired: refused before any call
        ws.create_cluster("nc6", vm_size="Standard_NC6", nodes=2)
    assert len(mock.calls) == 0
    with pytest.raises(AzureQuotaError):  # restricted for this subscription: asked, refused
        ws.create_cluster("h100", vm_size="Standard_NC40ads_H100_v5", nodes=2)
    assert [m for m, _ in arm.calls if m != "GET"] == []  # no PUT, PATCH, POST or DELETE
    assert not any(c.request.method != "GET" for c in mock.calls)  # the file share was not created either
    assert not (files.root / "batchaishare").exists()
    with pytest.raises(NotFoundError):
        ws.get_cluster("h100")


def test_the_first_experiment_creates_the_workspace_resources(
    ws: Workspace, arm: FakeArm, files: FakeFilesService
) -> None:
    ws.create_experiment("cifar")
    assert arm.count("PUT", "/resourceGroups/batchai.horovod$") == 1
    assert arm.count("PUT", "/storageAccounts/batchaitest$") == 1
    assert (files.root / "batchaishare").is_dir()
    assert [e.name for e in ws.list_experiments()] == ["cifar"]
