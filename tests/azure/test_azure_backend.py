"""The object model on the Azure backend: the real SDK clients against the fake ARM and Files services."""

from __future__ import annotations

import base64
import gzip
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure_helpers import ACCOUNT, SUBSCRIPTION, TOKEN, all_messages, backend_options
from fake_arm import FakeArm
from fake_files import FakeFilesService

from batchai_sdk import Workspace
from batchai_sdk._models import ClusterState, NodeCounts
from batchai_sdk.backends.azure import AzureBackend, AzureQuotaError
from batchai_sdk.exceptions import AzureError, ValidationError


def workspace(make_backend: Callable[..., AzureBackend], **overrides: Any) -> Workspace:
    return Workspace(make_backend(**overrides))


def vmss_put(arm: FakeArm, name: str) -> dict[str, Any]:
    return [b for m, p, b in arm.bodies if m == "PUT" and p.endswith(f"/virtualMachineScaleSets/{name}")][-1]


def test_workspace_creates_or_reuses_group_storage_and_share(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, files: FakeFilesService
) -> None:
    ws = workspace(make_backend)
    assert arm.calls == []  # constructing makes no call; the first experiment creates the resources
    ws.create_experiment("cifar")
    group = arm.groups["batchai.horovod"]
    assert group["location"] == "eastus"
    assert group["tags"] == {"batchai-workspace": "batchaidev", "batchai-created-by": "batchaidev"}
    assert (
        json.loads((files.share_dir("batchaishare") / ".batchai/workspace.json").read_text())["backend"]
        == "azure"
    )
    ws.close()

    again = workspace(make_backend)  # a second session finds everything
    assert again.get_experiment("cifar").name == "cifar"
    assert (
        arm.count("PUT", "storageAccounts") == 1
        and arm.count("PUT", r"/resourcegroups/batchai\.horovod$") == 1
    )
    assert ws.backend.describe()["storage_account"] == ACCOUNT
    assert "key" not in json.dumps(again.backend.describe()).lower()


def test_derived_storage_account_names_are_valid_and_stable(
    make_backend: Callable[..., AzureBackend],
) -> None:
    a = make_backend(storage_account=None)
    b = make_backend(storage_account=None)
    name = a.names.storage_account
    assert name == b.names.storage_account and 3 <= len(name) <= 24 and name.isalnum() and name.islower()
    assert make_backend(storage_account=None, resource_group="other").names.storage_account != name


def test_cluster_is_a_scale_set_with_the_workspace_key_and_node_setup(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    ws = workspace(make_backend)
    cluster = ws.create_cluster(
        "nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2, vm_priority="lowpriority"
    )

    body = vmss_put(arm, "nc6cluster")
    profile = body["properties"]["virtualMachineProfile"]
    assert body["sku"] == {"name": "Standard_NC4as_T4_v3", "tier": "Standard", "capacity": 2}
    assert body["tags"] == {"batchai-workspace": "batchaidev", "batchai-cluster": "nc6cluster"}
    assert (profile["priority"], profile["evictionPolicy"]) == ("Spot", "Delete")
    key_file = tmp_path / "state" / "id_ed25519"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    public = (tmp_path / "state" / "id_ed25519.pub").read_text().strip()
    assert profile["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"] == public
    assert profile["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    ipconfig = profile["networkProfile"]["networkInterfaceConfigurations"][0]["properties"][
        "ipConfigurations"
    ][0]
    assert "publicIPAddressConfiguration" in ipconfig["properties"]
    assert ipconfig["properties"]["subnet"]["id"].endswith("/virtualNetworks/batchaidev-vnet/subnets/nodes")
    # the storage key travels only inside the extension's protectedSettings ...
    ext = profile["extensionProfile"]["extensions"][0]["properties"]
    script = gzip.decompress(base64.b64decode(ext["protectedSettings"]["script"])).decode()
    assert f"password={arm.storage_keys[0]}" in script
    assert "/etc/smbcredentials/batchaitest.cred" in script
    without = json.dumps(
        {
            **body,
            "properties": {
                **body["properties"],
                "virtualMachineProfile": {k: v for k, v in profile.items() if k != "extensionProfile"},
            },
        }
    )
    assert arm.storage_keys[0] not in without
    # ... which ARM never returns
    assert arm.storage_keys[0] not in json.dumps(
        arm._vmss_view(arm.resources[next(k for k in arm.resources if k.endswith("/nc6cluster"))])
    )
    assert cluster.state is ClusterState.RESIZING


def test_dedicated_cluster_is_regular_priority(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend)
    ws.create_cluster(
        "c",
        vm_size="Standard_NC4as_T4_v3",
        nodes=1,
        image="Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest",
    )
    profile = vmss_put(arm, "c")["properties"]["virtualMachineProfile"]
    assert profile["priority"] == "Regular" and "evictionPolicy" not in profile
    assert profile["storageProfile"]["imageReference"] == {
        "publisher": "Canonical",
        "offer": "0001-com-ubuntu-server-jammy",
        "sku": "22_04-lts-gen2",
        "version": "latest",
    }


def test_nodes_go_from_preparing_to_idle_as_node_setup_finishes(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    arm.instance_delay = 2
    ws = workspace(make_backend)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=3)
    assert cluster.node_counts == NodeCounts(preparing=3)
    cluster.wait_until_steady(timeout=30, poll_interval=0)
    assert cluster.state is ClusterState.STEADY
    assert cluster.node_counts == NodeCounts(idle=3)
    nodes = ws.backend.cluster_status(cluster.spec).nodes
    assert [n.id for n in nodes] == ["nc6cluster_0", "nc6cluster_1", "nc6cluster_2"]
    assert [n.address for n in nodes] == ["10.0.0.4", "10.0.0.5", "10.0.0.6"]


def test_failed_node_setup_shows_as_unusable(make_backend: Callable[..., AzureBackend], arm: FakeArm) -> None:
    ws = workspace(make_backend)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2)
    inst = arm.instance("nc6cluster", "1")
    inst.setup, inst.setup_message = "failed", "Enable failed: [stderr]\n[batchai] failed: mount /mnt/x\n"
    arm.make_ready()
    assert cluster.node_counts == NodeCounts(idle=1, unusable=1)
    reason = ws.backend.cluster_status(cluster.spec).reasons["nc6cluster_1"]
    assert reason.startswith("node setup failed") and "mount" in reason


def test_resize_grows_and_shrinks_to_zero(make_backend: Callable[..., AzureBackend], arm: FakeArm) -> None:
    ws = workspace(make_backend)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    cluster.resize(3)
    patches = [
        b for m, p, b in arm.bodies if m == "PATCH" and p.endswith("/virtualMachineScaleSets/nc6cluster")
    ]
    assert patches == [{"sku": {"capacity": 3}}]
    cluster.wait_until_steady(timeout=30, poll_interval=0)
    assert cluster.node_counts == NodeCounts(idle=3)
    ws.share.write_json(
        ".batchai/clusters/nc6cluster/nodes.json",
        {"nodes": {"nc6cluster_2": {"job": "e/j", "phase": "running"}}},
    )
    cluster.resize(1)  # the unclaimed nodes go, highest instance first
    deleted = [b for m, p, b in arm.bodies if m == "POST" and p.endswith("/nc6cluster/delete")][-1]
    assert deleted == {"instanceIds": ["1", "0"]}
    cluster.resize(0, wait=True, timeout=30)
    assert cluster.node_counts == NodeCounts() and cluster.state is ClusterState.STEADY


def test_delete_cluster_removes_the_scale_set_only(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    ws = workspace(make_backend)
    cluster = ws.create_cluster(
        "nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2, node_setup_secrets={"TOKEN": "vm-s3cr3t"}
    )
    # the setup task's secrets: with the SSH state that runs node setup (0600), never sent to ARM
    kept = tmp_path / "state" / "ssh" / "clusters" / "nc6cluster" / "setup-secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and json.loads(kept.read_text()) == {
        "TOKEN": "vm-s3cr3t"
    }
    assert [b for _, _, b in arm.bodies if "vm-s3cr3t" in json.dumps(b)] == []
    arm.make_ready()
    cluster.delete()
    assert not kept.exists()
    st = ws.backend.cluster_status(cluster.spec)
    assert {s.value for s in st.node_states.values()} <= {"leaving"}
    assert arm.count("DELETE", r"/virtualMachineScaleSets/nc6cluster$") == 1
    assert arm.count("DELETE", r"virtualNetworks|networkSecurityGroups|storageAccounts") == 0
    ws.backend.delete_cluster(cluster.spec)  # again: no error


def test_quota_error_on_create_says_what_to_change(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend)
    arm.inject(
        "PUT",
        r"/virtualMachineScaleSets/big$",
        409,
        {
            "error": {
                "code": "OperationNotAllowed",
                "message": "Operation could not be completed as it results in exceeding approved standardNCSv3Family "
                "Cores quota. Current Limit: 24, Current Usage: 0, Additional Required: 96.",
            }
        },
    )
    with pytest.raises(AzureQuotaError) as info:
        ws.create_cluster("big", vm_size="Standard_NC64as_T4_v3", nodes=4)
    assert "quota" in info.value.hint and "fewer nodes" in info.value.hint
    assert TOKEN not in all_messages(info.value) and arm.storage_keys[0] not in all_messages(info.value)
    assert [c.name for c in ws.list_clusters()] == []


def test_an_allocation_failure_after_acceptance_is_raised_by_the_next_status(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend)
    arm.make_ready()
    ws.create_cluster("first", vm_size="Standard_NC4as_T4_v3", nodes=1, timeout=10)  # its operation has ended
    arm.inject(
        "GET",
        r"/operations/",
        200,
        {
            "status": "Failed",
            "error": {
                "code": "AllocationFailed",
                "message": "Allocation failed. We do not have sufficient capacity.",
            },
        },
    )
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    with pytest.raises(AzureQuotaError) as info:
        for _ in range(5):
            _ = cluster.state
    assert info.value.code == "AllocationFailed" and "capacity" in str(info.value)


def test_host_keys_are_pinned_from_run_command_per_vm(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    backend = make_backend()
    ws = Workspace(backend)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=2)
    arm.make_ready()
    backend.cluster_status(cluster.spec)
    backend.pin_host_keys(cluster.spec)

    known = (tmp_path / "state" / "known_hosts").read_text().splitlines()
    key0 = " ".join(arm.instance("nc6cluster", "0").host_key.split()[:2])
    assert f"10.0.0.4 {key0}" in known and f"20.0.0.1 {key0}" in known
    assert len(known) == 4
    assert stat.S_IMODE((tmp_path / "state" / "known_hosts").stat().st_mode) == 0o600
    runs = [b for m, p, b in arm.bodies if m == "POST" and p.endswith("/runCommand")]
    assert runs[0] == {"commandId": "RunShellScript", "script": ["cat /etc/ssh/ssh_host_ed25519_key.pub"]}
    backend.pin_host_keys(cluster.spec)  # pinned already: no new run-command
    assert len([1 for m, p in arm.calls if m == "POST" and p.endswith("/runCommand")]) == 2


def test_ws_delete_removes_the_group_it_created(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    ws = workspace(make_backend)
    ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    ws.delete(force=True)
    assert "batchai.horovod" not in arm.groups
    assert arm.resources == {}
    assert not (tmp_path / "state").exists()


def test_ws_delete_in_a_group_it_found_removes_only_its_tagged_resources(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, credential: Any
) -> None:
    from batchai_sdk.backends.azure.clients import AzureClients, ClientOptions

    clients = AzureClients(credential, SUBSCRIPTION, ClientOptions())
    clients.resource.resource_groups.create_or_update(
        "batchai.horovod", {"location": "eastus", "tags": {"team": "ml"}}
    )
    ws = workspace(make_backend)
    ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    ws.delete(force=True)
    assert arm.groups["batchai.horovod"]["tags"] == {"team": "ml"}  # untouched
    assert not any(
        k.endswith(("/nc6cluster", "/batchaidev-vnet", "/batchaidev-nsg", "/batchaitest"))
        for k in arm.resources
    )


def test_bad_arguments_are_refused_before_any_call(tmp_path: Path, credential: Any) -> None:
    base = backend_options(tmp_path, credential)
    for field, value in [
        ("resource_group", "bad/name"),
        ("location", "East US!"),
        ("storage_account", "Has-Caps"),
        ("ssh_source_cidr", "not-an-address"),
        ("admin_user", "root"),
        ("image", "ubuntu"),
    ]:
        with pytest.raises(ValidationError) as info:
            AzureBackend("ws", **{**base, field: value})
        assert info.value.field == field


def test_without_a_cidr_the_client_address_is_asked_for(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend, ssh_source_cidr=None, client_address=lambda: "198.51.100.23")
    ws.create_cluster("c", vm_size="Standard_NC4as_T4_v3", nodes=1)
    nsg = [b for m, p, b in arm.bodies if m == "PUT" and p.endswith("/networkSecurityGroups/batchaidev-nsg")][
        -1
    ]
    assert nsg["properties"]["securityRules"][0]["properties"]["sourceAddressPrefix"] == "198.51.100.23/32"

    def offline() -> str:
        raise OSError("no route to api.ipify.org")

    ws2 = workspace(make_backend, ssh_source_cidr=None, client_address=offline)
    with pytest.raises(ValidationError) as info:
        ws2.create_cluster("d", vm_size="Standard_NC4as_T4_v3", nodes=1)
    assert info.value.field == "ssh_source_cidr" and "could not be detected" in str(info.value)


def test_unknown_azure_error_codes_pass_through(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend)
    arm.inject(
        "PUT",
        r"/virtualMachineScaleSets/c$",
        400,
        {
            "error": {
                "code": "InvalidParameter",
                "message": "The value of parameter imageReference.sku is invalid.",
            }
        },
    )
    with pytest.raises(AzureError) as info:
        ws.create_cluster("c", vm_size="Standard_NC4as_T4_v3", nodes=1)
    assert info.value.code == "InvalidParameter" and not isinstance(info.value, AzureQuotaError)
    assert "imageReference.sku" in str(info.value)


def test_a_new_vm_at_an_old_address_gets_its_own_pinned_key(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    backend = make_backend()
    ws = Workspace(backend)
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    backend.cluster_status(cluster.spec)
    backend.pin_host_keys(cluster.spec)
    old = " ".join(arm.instance("nc6cluster", "0").host_key.split()[:2])
    ws.delete_cluster("nc6cluster")
    for _ in range(3):
        backend.cluster_status(cluster.spec)  # the deletion completes
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=1)
    arm.make_ready()
    assert [n.address for n in backend.cluster_status(cluster.spec).nodes] == ["10.0.0.4"]  # the same address
    backend.pin_host_keys(cluster.spec)
    new = " ".join(arm.instance("nc6cluster", "0").host_key.split()[:2])
    known = (tmp_path / "state" / "known_hosts").read_text()
    assert new != old and f"10.0.0.4 {new}" in known and old not in known


def test_the_tutorial_job_json_is_accepted_unchanged(
    make_backend: Callable[..., AzureBackend], arm: FakeArm, tmp_path: Path
) -> None:
    from batchai_sdk import Job

    ws = workspace(make_backend)
    exp = ws.create_experiment("cifar")
    cluster = ws.create_cluster("nc6cluster", vm_size="Standard_NC4as_T4_v3", nodes=4)
    script = tmp_path / "cifar_cnn_distributed.py"
    script.write_text("print('the tutorial script')\n")
    ws.share.upload(script, "cifar/cifar_cnn_distributed.py")  # through the Files API
    tutorial = Path(__file__).parent.parent / "data" / "tutorial_job.json"
    job = Job.from_batchai_json(
        tutorial, experiment=exp, cluster=cluster, name="cifar_distributed", storage_account=ACCOUNT
    )
    spec = job.spec
    assert (spec.node_count, spec.mount_path, spec.container_image) == (
        4,
        "myshare",
        "tensorflow/tensorflow:1.8.0-gpu",
    )
    assert spec.args == ("--dir=$AZ_BATCHAI_JOB_MOUNT_ROOT/myshare/cifar",)
    # its paths resolve onto the workspace's Azure file share
    assert job.paths.stdouterr == "cifar/experiments/cifar/jobs/cifar_distributed/stdouterr"
    assert job.to_batchai_json(storage_account=ACCOUNT)["properties"]["nodeCount"] == 4


def test_an_azure_cluster_scales_down_when_idle_unless_told_not_to(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    ws = workspace(make_backend)
    plain = ws.create_cluster("plain", vm_size="Standard_NC4as_T4_v3", nodes=2)
    auto = plain.spec.autoscale
    assert auto is not None and (auto.min_nodes, auto.max_nodes, auto.initial) == (0, 2, 2)
    assert auto.idle_seconds_before_scaledown == 1800  # the safe default: idle nodes stop costing
    kept = ws.create_cluster(
        "kept", vm_size="Standard_NC4as_T4_v3", nodes=2, idle_seconds_before_scaledown=None
    )
    assert kept.spec.autoscale is None  # opted out


def test_a_retired_size_is_refused_before_any_azure_call(
    make_backend: Callable[..., AzureBackend], arm: FakeArm
) -> None:
    from batchai_sdk.exceptions import UnsupportedVMSizeError

    ws = workspace(make_backend)
    before = len(arm.bodies)
    with pytest.raises(UnsupportedVMSizeError) as err:
        ws.create_cluster("nc6cluster", vm_size="Standard_NC6", nodes=1)  # the tutorial's size, retired 2023
    assert "Standard_NC4as_T4_v3" in str(err.value) and "2023-09" in str(err.value)
    assert len(arm.bodies) == before  # no scale set was asked for
