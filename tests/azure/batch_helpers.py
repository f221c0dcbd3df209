"""An Azure workspace on the Azure Batch engine against the fakes: the real azure-mgmt-* clients on the
fake ARM (with Batch accounts), the real ``azure-batch`` client on the fake Batch service, the real
``ShareClient`` on the fake Files API (a folder the loopback "nodes" see as their mount)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import responses
from azure_helpers import ACCOUNT, SUBSCRIPTION, FakeCredential
from fake_batch import FakeBatchArm, FakeBatchService
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk.backends.azure_batch.account import batch_account_name

RESOURCE_GROUP = "batchai.horovod"


def batch_account() -> str:
    return batch_account_name("batchaidev", SUBSCRIPTION, RESOURCE_GROUP)


def batch_workspace(
    mock: responses.RequestsMock, tmp_path: Path, *, credential: Any = None, **options: Any
) -> tuple[Workspace, FakeBatchArm, FakeBatchService, FakeFilesService]:
    arm = FakeBatchArm(SUBSCRIPTION)
    service = FakeBatchService(account=batch_account())
    files = FakeFilesService(tmp_path / "mounts", ACCOUNT)
    service.register(mock)  # its host is not ARM's: the two never match one URL
    arm.register(mock)
    files.register(mock)
    settings: dict[str, Any] = {
        "subscription_id": SUBSCRIPTION,
        "resource_group": RESOURCE_GROUP,
        "location": "eastus",
        "credential": credential or FakeCredential(),
        "storage_account": ACCOUNT,
        "state_dir": tmp_path / "client_state",
        "polling_interval": 0,
        "retry_total": 2,
        "retry_backoff_factor": 0,
        "share_retry_backoff": 0,
        "install_stack": False,
        **options,
    }
    ws = Workspace.azure("batchaidev", engine="batch", **settings)
    return ws, arm, service, files
