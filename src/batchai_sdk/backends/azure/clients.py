"""Construction of the Azure SDK clients: one credential, one subscription, one retry and timeout policy.

azure-core's RetryPolicy already honours ``Retry-After`` on 429 and 5xx answers; what we set is how
long to wait for a connection and how often to retry one, so that an unreachable Azure fails in seconds
instead of minutes of silent retries (the SDK default is 10 retries with exponential backoff).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ...exceptions import ValidationError
from . import _sdk

PUBLIC_ARM = "https://management.azure.com"
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def resolve_subscription(subscription_id: str | None) -> str:
    """The subscription from the argument, else ``AZURE_SUBSCRIPTION_ID``; a GUID either way."""
    value = subscription_id or os.environ.get("AZURE_SUBSCRIPTION_ID")
    if not value:
        raise ValidationError(
            "subscription_id", subscription_id, "an Azure subscription id (argument or AZURE_SUBSCRIPTION_ID)"
        )
    value = value.strip()
    if not _GUID.match(value):
        raise ValidationError("subscription_id", value, "a subscription GUID such as 00000000-0000-...")
    return value


def default_credential() -> Any:
    """``DefaultAzureCredential``: environment, workload/managed identity, Azure CLI, ... in that order."""
    return _sdk.identity().DefaultAzureCredential()


@dataclass(frozen=True)
class ClientOptions:
    """Pipeline settings shared by every client. Tests pass ``polling_interval=0`` and few retries."""

    base_url: str = PUBLIC_ARM
    polling_interval: float | None = None  # seconds between LRO polls; None: the SDK's 30 s
    retry_total: int | None = None  # None: the SDK's 10; Retry-After is honoured either way
    retry_connect: int = 1  # a refused or timed-out connection is retried once, then reported
    retry_backoff_factor: float | None = None  # None: the SDK's 0.8 s exponential backoff
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    extra: dict[str, Any] = field(default_factory=dict)  # passed to every client (e.g. transport=...)

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "retry_connect": self.retry_connect,
            "connection_timeout": self.connect_timeout,
            "read_timeout": self.read_timeout,
        }
        if self.polling_interval is not None:
            out["polling_interval"] = self.polling_interval
        if self.retry_total is not None:
            out["retry_total"] = self.retry_total
        if self.retry_backoff_factor is not None:
            out["retry_backoff_factor"] = self.retry_backoff_factor
        out.update(self.extra)
        return out

    @property
    def credential_scopes(self) -> list[str]:
        return [self.base_url.rstrip("/") + "/.default"]


class AzureClients:
    """The management clients of one subscription, made on first use (no network call before)."""

    def __init__(self, credential: Any | None, subscription_id: str | None, options: ClientOptions) -> None:
        self.subscription_id = resolve_subscription(subscription_id)
        self._credential = credential
        self.options = options

    @cached_property
    def credential(self) -> Any:
        return self._credential if self._credential is not None else default_credential()

    def _make(self, cls: Any) -> Any:
        return cls(
            self.credential,
            self.subscription_id,
            base_url=self.options.base_url,
            credential_scopes=self.options.credential_scopes,
            **self.options.kwargs(),
        )

    @cached_property
    def resource(self) -> Any:
        return self._make(_sdk.resource().ResourceManagementClient)

    @cached_property
    def compute(self) -> Any:
        return self._make(_sdk.compute().ComputeManagementClient)

    @cached_property
    def network(self) -> Any:
        return self._make(_sdk.network().NetworkManagementClient)

    @cached_property
    def storage(self) -> Any:
        return self._make(_sdk.storage().StorageManagementClient)

    @cached_property
    def authorization(self) -> Any:
        return self._make(_sdk.authorization().AuthorizationManagementClient)

    @cached_property
    def batch(self) -> Any:
        """Batch accounts and their quotas (azure-mgmt-batch): the Azure Batch engine only."""
        return self._make(_sdk.batch_mgmt().BatchManagementClient)

    def close(self) -> None:
        for name in ("resource", "compute", "network", "storage", "authorization", "batch"):
            client = self.__dict__.pop(name, None)
            if client is not None:
                client.close()
