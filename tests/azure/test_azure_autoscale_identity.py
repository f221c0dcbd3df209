"""Scale-down without the client on Azure: the scale set's system-assigned identity, its role on that scale
set only (the real azure-mgmt-authorization client over HTTP against the fake ARM), and the head node's
stdlib helper (node/azure/capacity.py) that takes an IMDS token and deletes instances / sets capacity
against the fake ARM served on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from azure_helpers import SUBSCRIPTION, TOKEN, FakeCredential
from fake_arm import FakeArm

from batchai_sdk._models import ClusterSpec
from batchai_sdk.backends.azure import provision as prov
from batchai_sdk.backends.azure.clients import AzureClients, ClientOptions
from batchai_sdk.exceptions import AzureError
from batchai_sdk.node.azure.capacity import (
    AzureCapacity,
    CapacityError,
    ScaleSetRef,
    instance_id_of,
)

NAMES = prov.WorkspaceNames(
    "batchaidev", SUBSCRIPTION, "batchai.horovod", "eastus", "batchaitest", "batchaishare"
)
FAST = ClientOptions(polling_interval=0, retry_total=3, retry_backoff_factor=0)
VM_CONTRIBUTOR_ID = (
    f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/"
    "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
)


def body(name: str = "c", nodes: int = 3, **kw: Any) -> Any:
    return prov.scale_set_body(
        NAMES,
        ClusterSpec(name, "Standard_NC4as_T4_v3", nodes),
        image=prov.DEFAULT_IMAGE,
        admin_user="batchai",
        public_key="ssh-ed25519 AAAA test",
        setup_script="echo setup",
        **kw,
    )


def test_scale_set_body_asks_for_a_system_assigned_identity() -> None:
    assert body()["identity"] == {"type": "SystemAssigned"}
    assert "identity" not in body(managed_identity=False)


# -- the role assignment, through azure-mgmt-authorization ---------------------------------------------------
@pytest.fixture
def clients(arm: FakeArm, credential: FakeCredential) -> Iterator[AzureClients]:
    c = AzureClients(credential, SUBSCRIPTION, FAST)
    prov.ensure_resource_group(c, NAMES)
    prov.begin_create_scale_set(c, NAMES, "c", body()).result()
    yield c
    c.close()


def test_grant_gives_vm_contributor_on_the_scale_set_only(clients: AzureClients, arm: FakeArm) -> None:
    assert prov.grant_scale_set_role(clients, NAMES, "c") is True
    scope = prov.scale_set_id(NAMES, "c")
    principal = arm.resources[scope.lower()]["identity"]["principalId"]
    [(rid, assignment)] = arm.role_assignments.items()
    props = assignment["properties"]
    assert props["scope"] == scope  # the scale set, not its group or the subscription
    assert props["roleDefinitionId"] == VM_CONTRIBUTOR_ID
    assert props["principalId"] == principal and props["principalType"] == "ServicePrincipal"
    assert rid == f"{scope}/providers/Microsoft.Authorization/roleAssignments/{assignment['name']}".lower()
    # the real client sent the REST shape: PUT {scope}/providers/Microsoft.Authorization/roleAssignments/{guid}
    [(method, path, sent)] = [b for b in arm.bodies if "roleAssignments" in b[1]]
    assert method == "PUT" and path.startswith(scope + "/providers/Microsoft.Authorization/roleAssignments/")
    assert set(sent["properties"]) >= {"roleDefinitionId", "principalId", "principalType"}


def test_grant_is_idempotent(clients: AzureClients, arm: FakeArm) -> None:
    assert prov.grant_scale_set_role(clients, NAMES, "c")
    assert prov.grant_scale_set_role(clients, NAMES, "c")  # 409 RoleAssignmentExists is success
    assert len(arm.role_assignments) == 1


def test_grant_refused_without_role_assignment_rights(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "PUT",
        r"/roleAssignments/",
        403,
        {
            "error": {
                "code": "AuthorizationFailed",
                "message": "The client 'x' with object id 'y' does not have authorization to perform action "
                "'Microsoft.Authorization/roleAssignments/write' over scope '/subscriptions/...'",
            }
        },
    )
    assert prov.grant_scale_set_role(clients, NAMES, "c") is False
    assert not arm.role_assignments


def test_grant_retries_while_the_new_identity_is_not_in_the_directory(
    clients: AzureClients, arm: FakeArm
) -> None:
    arm.inject(
        "PUT",
        r"/roleAssignments/",
        400,
        {"error": {"code": "PrincipalNotFound", "message": "Principal abc does not exist in the directory."}},
        times=2,
    )
    assert prov.grant_scale_set_role(clients, NAMES, "c", retry_delay=0) is True
    assert arm.count("PUT", r"/roleAssignments/") == 3


def test_grant_other_errors_raise(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "PUT", r"/roleAssignments/", 400, {"error": {"code": "InvalidRoleAssignmentRequest", "message": "x"}}
    )
    with pytest.raises(AzureError) as info:
        prov.grant_scale_set_role(clients, NAMES, "c")
    assert info.value.code == "InvalidRoleAssignmentRequest"


def test_no_identity_no_grant(clients: AzureClients, arm: FakeArm) -> None:
    prov.begin_create_scale_set(clients, NAMES, "plain", body("plain", managed_identity=False)).result()
    assert prov.grant_scale_set_role(clients, NAMES, "plain") is False
    assert not arm.role_assignments


def test_revoke_removes_the_grant_and_tolerates_none(clients: AzureClients, arm: FakeArm) -> None:
    prov.grant_scale_set_role(clients, NAMES, "c")
    prov.revoke_scale_set_role(clients, NAMES, "c")
    assert not arm.role_assignments
    prov.revoke_scale_set_role(clients, NAMES, "c")  # nothing left: no error
    prov.revoke_scale_set_role(clients, NAMES, "missing")


# -- the head node's helper, over real HTTP ------------------------------------------------------------------
@pytest.fixture
def served() -> Iterator[FakeArm]:
    fake = FakeArm(SUBSCRIPTION, op_polls=0, instance_delay=0)
    base = fake.serve()
    fake.accepted_tokens = {TOKEN}  # the client's token makes the set; the nodes will use IMDS's

    def call(method: str, path: str, data: Any) -> None:
        req = urllib.request.Request(
            f"{base}{path}?api-version=2024-03-01",
            data=json.dumps(data).encode(),
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status in (200, 201)

    call(
        "PUT", f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{NAMES.resource_group}", {"location": "eastus"}
    )
    call("PUT", prov.scale_set_id(NAMES, "c"), body("c", 3).as_dict())
    fake.make_ready()
    fake.accepted_tokens = {fake.imds_token}
    yield fake
    fake.close()


def capacity(fake: FakeArm, **kw: Any) -> AzureCapacity:
    return AzureCapacity(
        ScaleSetRef(SUBSCRIPTION, NAMES.resource_group, "c"),
        imds_url=f"{fake.base}/metadata/identity/oauth2/token",
        arm_url=fake.base,
        backoff=0,
        **kw,
    )


def live(fake: FakeArm) -> list[str]:
    return sorted(fake.instances[prov.scale_set_id(NAMES, "c").lower()])


def test_delete_named_instances_with_the_imds_token(served: FakeArm) -> None:
    cap = capacity(served)
    assert live(served) == ["0", "1", "2"]
    before = len(served.auth_headers)
    ops = cap.apply(["c_1"], target=2, current=3)  # the policy named node c_1
    assert len(ops) == 1 and ops[0].status == 202 and ops[0].poll_url
    assert cap.wait(ops[0], timeout=10, interval=0) == "Succeeded"
    assert live(served) == ["0", "2"]
    vmss = served.resources[prov.scale_set_id(NAMES, "c").lower()]
    assert vmss["sku"]["capacity"] == 2
    [(method, _, sent)] = [b for b in served.bodies if b[1].endswith("/delete")]
    assert (method, sent) == ("POST", {"instanceIds": ["1"]})
    # IMDS was asked once, with its header and ARM as the resource; ARM saw only that token
    assert len(served.imds_calls) == 1
    assert served.imds_calls[0]["resource"] == served.base + "/"
    assert served.imds_calls[0]["api-version"] == "2018-02-01"
    assert set(served.auth_headers[before:]) == {f"Bearer {served.imds_token}"}


def test_grow_by_capacity(served: FakeArm) -> None:
    cap = capacity(served)
    ops = cap.apply([], target=5, current=3)
    assert [op.status for op in ops] == [200]
    assert cap.wait(ops[0], timeout=10, interval=0) == "Succeeded"
    assert live(served) == ["0", "1", "2", "3", "4"]
    [(_, _, sent)] = [b for b in served.bodies if b[0] == "PATCH"]
    assert sent == {"sku": {"capacity": 5}}


def test_remove_and_replace_in_one_decision(served: FakeArm) -> None:
    cap = capacity(served)
    ops = cap.apply(["c_0"], target=3, current=3, interval=0)  # an unusable node replaced
    assert len(ops) == 2
    for op in ops:
        cap.wait(op, timeout=10, interval=0)
    assert len(live(served)) == 3 and "0" not in live(served)


def test_nothing_to_do_makes_no_call(served: FakeArm) -> None:
    calls = len(served.calls)
    assert capacity(served).apply([], target=3, current=3) == []
    assert len(served.calls) == calls and not served.imds_calls


def test_refusal_is_typed_and_never_shows_the_token(served: FakeArm) -> None:
    served.inject(
        "POST",
        r"/delete$",
        403,
        {"error": {"code": "AuthorizationFailed", "message": "no authorization to perform action delete"}},
    )
    cap = capacity(served)
    with pytest.raises(CapacityError) as info:
        cap.delete_instances(["1"])
    assert info.value.status == 403 and info.value.code == "AuthorizationFailed"
    token = served.imds_token
    assert token not in str(info.value) and token not in repr(info.value) and token not in repr(cap)


def test_expired_token_is_fetched_again(served: FakeArm) -> None:
    cap = capacity(served)
    cap.set_capacity(3)
    served.imds_token = "eyJ0eXAiOiJKV1QifQ.eyJuZXcifQ.bmV3LXNpZ25hdHVyZQ"
    served.accepted_tokens = {served.imds_token}  # the old one no longer passes: 401
    cap.set_capacity(3)
    assert len(served.imds_calls) == 2


def test_throttled_imds_is_retried(served: FakeArm) -> None:
    cap = capacity(served)
    original = served._imds
    answers = iter([(429, {}, "")])

    def throttled(*args: Any) -> Any:
        return next(answers, None) or original(*args)

    served._imds = throttled  # type: ignore[method-assign]
    cap.set_capacity(3)
    assert len(served.imds_calls) == 1


def test_unreachable_imds_is_a_capacity_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cap = AzureCapacity(
        ScaleSetRef(SUBSCRIPTION, "rg", "c"),
        imds_url=f"http://127.0.0.1:{port}/metadata/identity/oauth2/token",
        arm_url=f"http://127.0.0.1:{port}",
        attempts=2,
        backoff=0,
        timeout=2,
    )
    with pytest.raises(CapacityError, match="no answer after 2 attempt"):
        cap.set_capacity(1)


def test_instance_ids_of_node_ids() -> None:
    assert instance_id_of("nc6cluster_12") == "12"
    assert instance_id_of("my_cluster_3") == "3"
    for bad in ("12", "c_", "c_x"):
        with pytest.raises(CapacityError):
            instance_id_of(bad)


# -- wired into the backend ------------------------------------------------------------------------------
def test_backend_grants_at_create_and_revokes_at_delete(make_backend: Any, arm: FakeArm) -> None:
    from batchai_sdk import Workspace

    ws = Workspace(make_backend())
    cluster = ws.create_cluster("auto", vm_size="Standard_NC4as_T4_v3", nodes=1)
    scope = prov.scale_set_id(ws.backend.names, "auto")  # type: ignore[attr-defined]
    [assignment] = arm.role_assignments.values()
    assert assignment["properties"]["scope"] == scope
    assert arm.resources[scope.lower()]["identity"]["type"] == "SystemAssigned"
    cluster.delete()
    assert not arm.role_assignments
