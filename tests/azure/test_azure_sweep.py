"""``batchai_sdk.list_tagged_resources`` and ``batchai resource list`` (formerly ``sweep``, still working with a
deprecation note): what the SDK tagged across the subscription, through the
Resources and Resource Groups list APIs with a tag ``$filter`` (real SDK clients against the fake ARM)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from azure_helpers import SUBSCRIPTION, FakeCredential, backend_options
from fake_arm import FakeArm
from fake_files import FakeFilesService

import batchai_sdk
from batchai_sdk import Workspace
from batchai_sdk.backends.azure import AzureBackend
from batchai_sdk.cli import main


def untagged(arm: FakeArm) -> None:
    """Someone else's VM in the same subscription: never listed."""
    rid = arm.rg_id("other") + "/providers/Microsoft.Compute/virtualMachines/jumpbox"
    arm.resources[rid.lower()] = {
        "id": rid,
        "name": "jumpbox",
        "type": "Microsoft.Compute/virtualMachines",
        "location": "westus2",
        "tags": {"owner": "ops"},
        "properties": {"provisioningState": "Succeeded"},
    }


@pytest.fixture
def two_workspaces(
    make_backend: Callable[..., AzureBackend],
    arm: FakeArm,
    files: FakeFilesService,
    credential: FakeCredential,
    tmp_path: Path,
) -> Iterator[None]:
    ws = Workspace(make_backend())
    ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2)
    ws.create_cluster("idle", vm_size="Standard_NC4as_T4_v3", min_nodes=0, max_nodes=2)
    options = backend_options(tmp_path / "second", credential)
    second = Workspace(
        AzureBackend("second", **{**options, "resource_group": "batchai.other", "share_name": "second"})
    )
    second.create_experiment("e")  # its first object creates its resources
    untagged(arm)
    yield
    second.close()


def test_sweep_lists_every_tagged_resource_across_groups(
    two_workspaces: None, arm: FakeArm, credential: FakeCredential
) -> None:
    arm.queries.clear()
    found = batchai_sdk.list_tagged_resources(SUBSCRIPTION, credential=credential, retry_total=0)

    rows = {(r.resource_group, r.type.rsplit("/", 1)[-1], r.name): r for r in found}
    assert set(rows) == {
        ("batchai.horovod", "resourceGroups", "batchai.horovod"),
        ("batchai.horovod", "storageAccounts", "batchaitest"),
        ("batchai.horovod", "networkSecurityGroups", "batchaidev-nsg"),
        ("batchai.horovod", "virtualNetworks", "batchaidev-vnet"),
        ("batchai.horovod", "virtualMachineScaleSets", "nc6cluster"),
        ("batchai.horovod", "virtualMachineScaleSets", "idle"),
        ("batchai.other", "resourceGroups", "batchai.other"),
        ("batchai.other", "storageAccounts", "batchaitest"),
    }
    vmss = rows[("batchai.horovod", "virtualMachineScaleSets", "nc6cluster")]
    assert (vmss.workspace, vmss.cluster, vmss.vm_size, vmss.nodes, vmss.location) == (
        "batchaidev",
        "nc6cluster",
        "Standard_NC4as_T4_v3",
        2,
        "eastus",
    )
    assert rows[("batchai.horovod", "virtualMachineScaleSets", "idle")].nodes == 0
    assert vmss.created is not None and abs(vmss.created.timestamp() - time.time()) < 600
    assert rows[("batchai.other", "storageAccounts", "batchaitest")].workspace == "second"
    assert found[0].type == "Microsoft.Resources/resourceGroups"  # each group first, then its resources
    filters = [q for q in _queries(arm) if "$filter" in q]
    assert {q["$filter"] for q in filters} == {"tagName eq 'batchai-workspace'"}


def test_sweep_of_one_workspace_filters_by_tag_value(
    two_workspaces: None, arm: FakeArm, credential: FakeCredential
) -> None:
    arm.queries.clear()
    with pytest.warns(DeprecationWarning, match="renamed list_tagged_resources"):  # the old name still works
        found = batchai_sdk.sweep(SUBSCRIPTION, credential=credential, workspace="second", retry_total=0)
    assert [(r.type.rsplit("/", 1)[-1], r.name, r.workspace) for r in found] == [
        ("resourceGroups", "batchai.other", "second"),
        ("storageAccounts", "batchaitest", "second"),
    ]
    # ARM returns no tags (nor created time) for a tag-value filter: the workspace is the one asked for
    assert found[1].created is None
    assert {q["$filter"] for q in _queries(arm) if "$filter" in q} == {
        "tagName eq 'batchai-workspace' and tagValue eq 'second'"
    }


def _queries(arm: FakeArm) -> list[dict[str, str]]:
    return [q for q in arm.queries if q]


# -- the CLI, with DefaultAzureCredential's environment credential answered by a fake token endpoint -------
def _login(request: Any) -> tuple[int, dict[str, str], str]:
    tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
    root = f"https://login.microsoftonline.com/{tenant}"
    if request.url.startswith("https://login.microsoftonline.com/common/discovery/instance"):
        body: dict[str, Any] = {
            "tenant_discovery_endpoint": f"{root}/v2.0/.well-known/openid-configuration",
            "api-version": "1.1",
            "metadata": [],
        }
    elif "openid-configuration" in request.url:
        body = {
            "token_endpoint": f"{root}/oauth2/v2.0/token",
            "authorization_endpoint": f"{root}/oauth2/v2.0/authorize",
            "issuer": f"{root}/v2.0",
        }
    else:
        body = {
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": "eyJ0eXAi.e30.c2ln",
        }
    return 200, {"Content-Type": "application/json"}, json.dumps(body)


def test_batchai_sweep_prints_a_table(
    two_workspaces: None,
    arm: FakeArm,
    mock: responses.RequestsMock,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for method in ("GET", "POST"):
        mock.add_callback(method, re.compile(r"https://login\.microsoftonline\.com/.*"), callback=_login)
    monkeypatch.setenv("BATCHAI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AZURE_TENANT_ID", "72f988bf-86f1-41af-91ab-2d7cd011db47")
    monkeypatch.setenv("AZURE_CLIENT_ID", "a3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "client-secret-value")
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)

    assert main(["resource", "list", "--subscription", SUBSCRIPTION, "-o", "table"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == [
        "Resource",
        "Group",
        "Type",
        "Name",
        "Location",
        "Workspace",
        "VM",
        "Size",
        "Nodes",
        "Created",
    ]
    vmss = next(line for line in lines if " nc6cluster " in f" {line} ")
    assert "virtualMachineScaleSets" in vmss and "Standard_NC4as_T4_v3" in vmss and vmss.split()[-3] == "2"
    assert not any("jumpbox" in line for line in lines)
    assert "client-secret-value" not in out + err

    assert main(["sweep", "-w", "second", "-o", "json"]) == 2  # no subscription anywhere
    assert "--subscription is required" in capsys.readouterr().err
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    assert main(["sweep", "-w", "second", "-o", "json"]) == 0  # the old spelling, with a note
    out, err = capsys.readouterr()
    assert "renamed `batchai resource list`" in err
    data = json.loads(out)
    assert [(d["type"], d["workspace"]) for d in data] == [
        ("Microsoft.Resources/resourceGroups", "second"),
        ("Microsoft.Storage/storageAccounts", "second"),
    ]
