"""The real azure-mgmt clients over HTTP (``responses``): long-running operations, retries, paging, errors."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.mgmt.compute.models import Sku, VirtualMachineScaleSet
from azure_helpers import SUBSCRIPTION, TOKEN, FakeCredential, all_messages
from fake_arm import FakeArm

from batchai_sdk.backends.azure import AzureQuotaError
from batchai_sdk.backends.azure import provision as prov
from batchai_sdk.backends.azure.clients import AzureClients, ClientOptions, resolve_subscription
from batchai_sdk.exceptions import AzureError, ValidationError

NAMES = prov.WorkspaceNames(
    "batchaidev", SUBSCRIPTION, "batchai.horovod", "eastus", "batchaitest", "batchaishare"
)
FAST = ClientOptions(polling_interval=0, retry_total=3, retry_backoff_factor=0)


@pytest.fixture
def clients(arm: FakeArm, credential: FakeCredential) -> AzureClients:
    c = AzureClients(credential, SUBSCRIPTION, FAST)
    prov.ensure_resource_group(c, NAMES)
    return c


def test_put_polled_through_azure_asyncoperation_until_it_succeeds(
    clients: AzureClients, arm: FakeArm
) -> None:
    arm.op_polls = 2
    subnet = prov.ensure_network(clients, NAMES, "203.0.113.7/32")

    assert subnet.endswith("/virtualNetworks/batchaidev-vnet/subnets/nodes")
    # the status monitor was asked until it stopped saying InProgress (2 + the final Succeeded), per PUT
    assert arm.count("GET", r"/locations/eastus/operations/") == 2 * 3
    nsg = arm.resources[NAMES.nsg_id.lower()]
    assert nsg["properties"]["provisioningState"] == "Succeeded"
    rule = nsg["properties"]["securityRules"][0]["properties"]
    assert (rule["sourceAddressPrefix"], rule["destinationPortRange"], rule["access"]) == (
        "203.0.113.7/32",
        "22",
        "Allow",
    )
    vnet = arm.resources[
        f"/subscriptions/{SUBSCRIPTION}/resourcegroups/batchai.horovod/providers/microsoft.network/virtualnetworks/batchaidev-vnet"
    ]
    assert vnet["properties"]["subnets"][0]["properties"]["networkSecurityGroup"]["id"] == NAMES.nsg_id
    assert all(h == f"Bearer {TOKEN}" for h in arm.auth_headers)


def test_a_second_network_call_changes_only_the_ssh_source(clients: AzureClients, arm: FakeArm) -> None:
    prov.ensure_network(clients, NAMES, "203.0.113.7/32")
    puts = arm.count("PUT", "")
    prov.ensure_network(clients, NAMES, "203.0.113.7/32")
    assert arm.count("PUT", "") == puts  # nothing to change: reads only
    prov.ensure_network(clients, NAMES, "198.51.100.0/24")
    assert arm.count("PUT", "networkSecurityGroups") == 2
    rule = arm.resources[NAMES.nsg_id.lower()]["properties"]["securityRules"][0]["properties"]
    assert rule["sourceAddressPrefix"] == "198.51.100.0/24"


def test_storage_account_created_through_location_polling_then_key_read(
    clients: AzureClients, arm: FakeArm
) -> None:
    arm.op_polls = 3
    key = prov.ensure_storage_account(clients, NAMES)

    assert key == arm.storage_keys[0]
    assert arm.count("GET", r"/operationResults/") == 4  # 202 three times, then 200 with the account
    body = next(b for m, p, b in arm.bodies if m == "PUT" and "storageAccounts" in p)
    assert body["kind"] == "StorageV2" and body["properties"]["minimumTlsVersion"] == "TLS1_2"
    assert body["tags"] == {"batchai-workspace": "batchaidev"}
    # reused the second time: no second PUT
    prov.ensure_storage_account(clients, NAMES)
    assert arm.count("PUT", "storageAccounts") == 1


def test_429_is_retried_after_the_time_retry_after_asks(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "GET",
        r"/resourceGroups/batchai\.horovod$",
        429,
        {"error": {"code": "TooManyRequests", "message": "The request is being throttled."}},
        headers={"Retry-After": "1"},
    )
    before = arm.count("GET", r"/resourceGroups/batchai\.horovod$")
    started = time.monotonic()
    group = prov.get_resource_group(clients, NAMES)
    elapsed = time.monotonic() - started

    assert group is not None and group["tags"]["batchai-created-by"] == "batchaidev"
    assert arm.count("GET", r"/resourceGroups/batchai\.horovod$") == before + 2
    assert 1.0 <= elapsed < 5


def test_503_retried_then_given_up_with_the_arm_code(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "GET",
        r"/resourceGroups/batchai\.horovod$",
        503,
        {"error": {"code": "ServiceUnavailable", "message": "Service is temporarily unavailable."}},
        times=10,
    )
    before = arm.count("GET", r"/resourceGroups/batchai\.horovod$")
    with pytest.raises(AzureError) as info:
        prov.get_resource_group(clients, NAMES)
    assert info.value.code == "ServiceUnavailable" and info.value.status == 503
    assert arm.count("GET", r"/resourceGroups/batchai\.horovod$") == before + 1 + 3  # retry_total=3


def test_failed_long_running_operation_carries_the_arm_code_and_message(
    clients: AzureClients, arm: FakeArm
) -> None:
    arm.inject(
        "GET",
        r"/operations/",
        200,
        {
            "status": "Failed",
            "error": {
                "code": "VMExtensionProvisioningError",
                "message": "VM has reported a failure when processing extension 'batchai-node-setup'.",
            },
        },
    )
    with pytest.raises(AzureError) as info:
        prov.ensure_network(clients, NAMES, "203.0.113.7/32")
    err = info.value
    assert err.code == "VMExtensionProvisioningError"
    assert "processing extension 'batchai-node-setup'" in str(err)
    assert str(err).startswith("create network security group batchaidev-nsg failed")
    assert TOKEN not in all_messages(err)


@pytest.mark.parametrize(
    ("code", "message", "hint"),
    [
        (
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved standardNCSv3Family Cores quota. "
            "Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, "
            "Current Usage: 0, Additional Required: 24, (Minimum) New Limit Required: 24.",
            "request more of the vCPU quota of this VM family",
        ),
        (
            "SkuNotAvailable",
            "The requested size for resource '/subscriptions/x/resourceGroups/batchai.horovod/providers/"
            "Microsoft.Compute/virtualMachineScaleSets/nc6' is currently not available in location 'eastus' "
            "zones '' for subscription 'x'. Please try another size or deploy to a different location or zones.",
            "choose another vm_size or location",
        ),
        (
            "QuotaExceeded",
            "Operation results in exceeding quota limits of LowPriorityCores. Maximum allowed: 0, Current in use: 0,"
            " Additional requested: 24.",
            "Spot (low-priority) vCPU quota",
        ),
    ],
)
def test_quota_and_sku_errors_say_what_to_change(
    clients: AzureClients, arm: FakeArm, code: str, message: str, hint: str
) -> None:
    arm.inject("PUT", r"/virtualMachineScaleSets/nc6$", 409, {"error": {"code": code, "message": message}})
    with pytest.raises(AzureQuotaError) as info:
        prov.begin_create_scale_set(
            clients, NAMES, "nc6", VirtualMachineScaleSet(location="eastus", sku=Sku(capacity=4))
        )
    err = info.value
    assert err.code == code and err.status == 409
    assert hint in err.hint and hint in str(err)
    assert isinstance(err, AzureError)


def test_nested_deployment_error_reports_the_inner_quota_code(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "PUT",
        r"/virtualMachineScaleSets/nc6$",
        400,
        {
            "error": {
                "code": "InvalidTemplateDeployment",
                "message": "The template deployment failed.",
                "details": [
                    {"code": "QuotaExceeded", "message": "Operation results in exceeding quota limits."}
                ],
            }
        },
    )
    with pytest.raises(AzureQuotaError) as info:
        prov.begin_create_scale_set(clients, NAMES, "nc6", VirtualMachineScaleSet(location="eastus"))
    assert info.value.code == "QuotaExceeded"


def test_instances_are_read_across_pages_by_nextlink(
    clients: AzureClients, arm: FakeArm, make_backend: object
) -> None:
    arm.page_size = 2
    prov.ensure_network(clients, NAMES, "203.0.113.7/32")
    from batchai_sdk._models import ClusterSpec

    spec = ClusterSpec("nc6", "Standard_NC4as_T4_v3", 5)
    body = prov.scale_set_body(
        NAMES,
        spec,
        image=prov.DEFAULT_IMAGE,
        admin_user="azureuser",
        public_key="ssh-ed25519 AAAA x",
        setup_script="true",
    )
    prov.begin_create_scale_set(clients, NAMES, "nc6", body).result()
    vms = prov.list_instances(clients, NAMES, "nc6")

    assert [vm["instanceId"] for vm in vms] == ["0", "1", "2", "3", "4"]
    assert arm.count("GET", r"/virtualMachineScaleSets/nc6/virtualMachines$") == 3  # pages of 2, 2, 1
    assert vms[0]["properties"]["instanceView"]["statuses"][0]["code"].startswith("ProvisioningState/")


def test_missing_resources_read_as_none_and_deletes_of_missing_ones_succeed(clients: AzureClients) -> None:
    assert prov.get_scale_set(clients, NAMES, "nothing") is None
    poller = prov.begin_delete_scale_set(clients, NAMES, "nothing")  # ARM answers 204: nothing to do
    assert poller is None or (poller.done() and poller.result() is None)
    assert prov.list_instances(clients, NAMES, "nothing") == []


def test_the_token_is_sent_but_never_shown_in_errors(clients: AzureClients, arm: FakeArm) -> None:
    arm.inject(
        "GET",
        r"/resourceGroups/batchai\.horovod$",
        401,
        {"error": {"code": "InvalidAuthenticationToken", "message": "The access token is invalid."}},
    )
    with pytest.raises(AzureError) as info:
        prov.get_resource_group(clients, NAMES)
    assert info.value.code == "InvalidAuthenticationToken"
    assert arm.auth_headers[-1] == f"Bearer {TOKEN}"
    text = all_messages(info.value)
    assert TOKEN not in text and TOKEN[:20] not in text


def test_a_credential_that_cannot_get_a_token_fails_with_a_clear_error(arm: FakeArm) -> None:
    class NoLogin:
        def get_token(self, *scopes: str, **kwargs: object) -> object:
            raise ClientAuthenticationError(
                "DefaultAzureCredential failed to retrieve a token from the included credentials."
            )

    c = AzureClients(NoLogin(), SUBSCRIPTION, FAST)
    with pytest.raises(AzureError) as info:
        prov.get_resource_group(c, NAMES)
    assert info.value.code == "AuthenticationFailed"
    assert "az login" in str(info.value)


def test_unreachable_azure_fails_fast_with_a_clear_error(credential: FakeCredential) -> None:
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = ClientOptions(base_url=f"https://127.0.0.1:{port}", polling_interval=0, connect_timeout=2)
    c = AzureClients(credential, SUBSCRIPTION, options)
    started = time.monotonic()
    with pytest.raises(AzureError) as info:
        prov.get_resource_group(c, NAMES)
    assert time.monotonic() - started < 10
    assert info.value.code == "ServiceUnreachable"
    assert "Azure is unreachable" in str(info.value)
    assert TOKEN not in all_messages(info.value)


def test_subscription_comes_from_the_argument_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(ValidationError) as info:
        resolve_subscription(None)
    assert "AZURE_SUBSCRIPTION_ID" in str(info.value)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    assert resolve_subscription(None) == SUBSCRIPTION
    assert resolve_subscription(SUBSCRIPTION.upper()) == SUBSCRIPTION.upper()
    with pytest.raises(ValidationError):
        resolve_subscription("my-subscription")


def test_default_credential_is_defaultazurecredential(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from azure.identity import DefaultAzureCredential

    c = AzureClients(None, SUBSCRIPTION, FAST)
    assert isinstance(c.credential, DefaultAzureCredential)
