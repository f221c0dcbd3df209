"""Scale-set and instance states → ``ClusterStatus``, in one function.

Inputs are the REST shapes ARM returns (``GET virtualMachineScaleSets/{name}`` and
``GET .../virtualMachines?$expand=instanceView``), so the mapping is independent of SDK model classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._models import Node, NodeState
from ..base import ClusterStatus
from .errors import scrub

SETUP_EXTENSION = "batchai-node-setup"  # the CustomScript extension that runs node setup on every instance

_TRANSITIONAL = {"creating", "updating", "deleting", "migrating"}
_POWERED_OFF = {"stopped", "stopping", "deallocated", "deallocating"}


def _codes(statuses: Any) -> list[tuple[str, str]]:
    """(lower-cased code, message or display status) of an instance view's ``statuses``."""
    out = []
    for status in statuses or ():
        code = str(status.get("code") or "").lower()
        text = str(status.get("message") or status.get("displayStatus") or code)
        out.append((code, text))
    return out


def cluster_status_from_raw(
    scale_set: Mapping[str, Any] | None,
    instances: Sequence[tuple[Node, Mapping[str, Any]]],
    *,
    setup_extension: str | None = SETUP_EXTENSION,
    unreachable: Mapping[str, str] | None = None,
    secrets: tuple[str, ...] = (),
) -> ClusterStatus:
    """The cluster's machines and their infrastructure states.

    - resizing: the scale set is Creating/Updating/Deleting, or its live instances differ from its
      ``sku.capacity``;
    - leaving: the instance (or the whole scale set) is being deleted;
    - unusable: provisioning failed, node setup failed, the VM is stopped/deallocated, its VM agent is
      not ready after setup, or ``unreachable`` names it (an SSH probe failed) — with the reason;
    - preparing: the VM is still being created, or node setup (``setup_extension``) has not finished;
    - otherwise the node is absent from ``node_states``: available, and the object model tells idle
      from running by the job claims on the share.
    """
    unreachable = unreachable or {}
    if scale_set is None:
        return ClusterStatus(resizing=False, nodes=())
    props = scale_set.get("properties") or {}
    vmss_state = str(props.get("provisioningState") or "").lower()
    capacity = int((scale_set.get("sku") or {}).get("capacity") or 0)

    states: dict[str, NodeState] = {}
    reasons: dict[str, str] = {}
    live = 0
    for node, raw in instances:
        vm = raw.get("properties") or {}
        view = vm.get("instanceView") or {}
        vm_state = str(vm.get("provisioningState") or "").lower()
        codes = _codes(view.get("statuses"))
        provisioning = [c for c in codes if c[0].startswith("provisioningstate/")]
        power = next((c[0].split("/", 1)[1] for c in codes if c[0].startswith("powerstate/")), None)
        setup = None
        for ext in view.get("extensions") or ():
            if setup_extension and ext.get("name") == setup_extension:
                setup = _codes(ext.get("statuses"))
        setup_code = setup[0][0] if setup else None
        agent = _codes((view.get("vmAgent") or {}).get("statuses"))

        if (
            vmss_state == "deleting"
            or vm_state == "deleting"
            or any("/deleting" in c for c, _ in provisioning)
        ):
            states[node.id] = NodeState.LEAVING
            continue
        live += 1
        failed = vm_state == "failed" or any(
            c.startswith("provisioningstate/failed") for c, _ in provisioning
        )
        if setup_code is not None and setup_code.startswith("provisioningstate/failed"):
            states[node.id] = NodeState.UNUSABLE
            reasons[node.id] = "node setup failed: " + setup[0][1] if setup else "node setup failed"
        elif failed:
            states[node.id] = NodeState.UNUSABLE
            why = next((text for c, text in provisioning if c.startswith("provisioningstate/failed")), None)
            reasons[node.id] = "provisioning failed" + (f": {why}" if why else "")
        elif power in _POWERED_OFF:
            states[node.id] = NodeState.UNUSABLE
            reasons[node.id] = f"the VM is {power}"
        elif (
            vm_state in _TRANSITIONAL
            or not view
            or power in (None, "starting")
            or (setup_extension and setup_code != "provisioningstate/succeeded")
        ):
            states[node.id] = NodeState.PREPARING
        elif agent and not any(c == "provisioningstate/succeeded" for c, _ in agent):
            states[node.id] = NodeState.UNUSABLE
            reasons[node.id] = "unreachable: the VM agent is not ready (" + agent[0][1] + ")"
        elif node.id in unreachable:
            states[node.id] = NodeState.UNUSABLE
            reasons[node.id] = "unreachable: " + unreachable[node.id]

    resizing = vmss_state in _TRANSITIONAL or live != capacity
    return ClusterStatus(
        resizing=resizing,
        nodes=tuple(node for node, _ in instances),
        node_states=states,
        reasons={k: scrub(v, secrets)[:500] for k, v in reasons.items()},
    )
