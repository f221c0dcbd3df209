"""The one mapping from scale-set and instance views (REST shapes) to ClusterStatus."""

from __future__ import annotations

from typing import Any

from batchai_sdk._models import Node, NodeState
from batchai_sdk.backends.azure.states import SETUP_EXTENSION, cluster_status_from_raw


def vmss(state: str = "Succeeded", capacity: int = 1) -> dict[str, Any]:
    return {
        "name": "nc6",
        "sku": {"name": "Standard_NC4as_T4_v3", "capacity": capacity},
        "properties": {"provisioningState": state},
    }


def vm(
    state: str = "Succeeded",
    power: str | None = "running",
    setup: str | None = "ProvisioningState/succeeded",
    setup_message: str = "Enable succeeded",
    agent: str = "ProvisioningState/succeeded",
    failed_code: str | None = None,
) -> dict[str, Any]:
    statuses = [
        {"code": failed_code or f"ProvisioningState/{state.lower()}", "message": "Allocation failed."}
    ]
    if power:
        statuses.append({"code": f"PowerState/{power}"})
    view: dict[str, Any] = {
        "statuses": statuses,
        "vmAgent": {
            "statuses": [{"code": agent, "displayStatus": "Ready" if "succeeded" in agent else "Not Ready"}]
        },
    }
    if setup:
        view["extensions"] = [
            {"name": SETUP_EXTENSION, "statuses": [{"code": setup, "message": setup_message}]}
        ]
    return {"properties": {"provisioningState": state, "instanceView": view}}


def status(scale_set: dict[str, Any] | None, *vms: dict[str, Any], **kwargs: Any):  # type: ignore[no-untyped-def]
    nodes = [
        (Node(id=f"nc6_{i}", address=f"10.0.0.{4 + i}", machine=f"nc6{i:06x}"), v) for i, v in enumerate(vms)
    ]
    return cluster_status_from_raw(scale_set, nodes, **kwargs)


def test_ready_instances_are_left_to_the_object_model() -> None:
    st = status(vmss(capacity=2), vm(), vm())
    assert not st.resizing
    assert [n.id for n in st.nodes] == ["nc6_0", "nc6_1"]
    assert st.node_states == {}


def test_scale_set_creating_or_updating_is_resizing() -> None:
    assert status(vmss("Creating", 1), vm("Creating", power=None, setup=None)).resizing
    assert status(vmss("Updating", 2), vm(), vm()).resizing


def test_capacity_other_than_the_live_instances_is_resizing() -> None:
    assert status(vmss(capacity=3), vm(), vm()).resizing
    assert not status(vmss(capacity=0)).resizing


def test_a_vm_still_being_made_or_running_node_setup_is_preparing() -> None:
    st = status(
        vmss("Creating", 3),
        vm("Creating", power="starting", setup=None),
        vm(setup="ProvisioningState/transitioning"),
        vm(setup=None),  # the extension has not reported yet
    )
    assert st.node_states == {
        "nc6_0": NodeState.PREPARING,
        "nc6_1": NodeState.PREPARING,
        "nc6_2": NodeState.PREPARING,
    }


def test_failed_provisioning_or_node_setup_is_unusable_with_the_reason() -> None:
    st = status(
        vmss(capacity=2),
        vm("Failed", failed_code="ProvisioningState/failed/AllocationFailed"),
        vm(
            "Failed",
            setup="ProvisioningState/failed/1",
            setup_message="Enable failed: [stderr] [batchai] the share is not mounted key=c2VjcmV0",
        ),
        secrets=("c2VjcmV0",),
    )
    assert st.node_states == {"nc6_0": NodeState.UNUSABLE, "nc6_1": NodeState.UNUSABLE}
    assert st.reasons["nc6_0"] == "provisioning failed: Allocation failed."
    assert "the share is not mounted" in st.reasons["nc6_1"] and st.reasons["nc6_1"].startswith(
        "node setup failed"
    )
    assert "c2VjcmV0" not in st.reasons["nc6_1"]


def test_stopped_deallocated_or_unreachable_vms_are_unusable() -> None:
    st = status(
        vmss(capacity=3),
        vm(power="deallocated"),
        vm(agent="ProvisioningState/Unavailable"),
        vm(),
        unreachable={"nc6_2": "ssh 10.0.0.6:22: cannot connect: timed out"},
    )
    assert st.node_states == {n: NodeState.UNUSABLE for n in ("nc6_0", "nc6_1", "nc6_2")}
    assert st.reasons["nc6_0"] == "the VM is deallocated"
    assert st.reasons["nc6_1"].startswith("unreachable: the VM agent is not ready")
    assert st.reasons["nc6_2"].startswith("unreachable: ssh 10.0.0.6:22")


def test_deleting_instances_and_scale_sets_are_leaving() -> None:
    st = status(vmss(capacity=1), vm(), vm("Deleting"))
    assert st.node_states == {"nc6_1": NodeState.LEAVING}
    assert not st.resizing  # one live instance, capacity one
    gone = status(vmss("Deleting", 2), vm(), vm())
    assert gone.resizing and set(gone.node_states.values()) == {NodeState.LEAVING}


def test_no_scale_set_is_no_nodes() -> None:
    st = status(None)
    assert st.nodes == () and not st.resizing


def test_without_a_setup_extension_a_running_vm_is_ready() -> None:
    assert status(vmss(), vm(setup=None), setup_extension=None).node_states == {}
