"""Constants and helpers shared by the Azure tests (a module of its own: ``conftest`` names collide)."""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from azure.core.credentials import AccessToken

SUBSCRIPTION = "6d7b9c2e-1f3a-4b5c-8d9e-0a1b2c3d4e5f"
# Shaped like a real access token (a JWT), so that the scrubbing of tokens is tested on the real shape.
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL21hbmFnZW1lbnQuYXp1cmUuY29tIn0.c2lnbmF0dXJlLXNlY3JldA"
ACCOUNT = "batchaitest"


class FakeCredential:
    """A TokenCredential: what azure-core's BearerTokenCredentialPolicy asks for a token."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


def backend_options(tmp_path: Path, credential: Any) -> dict[str, Any]:
    """Fast, offline settings: no polling delay, few retries, a fixed SSH source CIDR."""
    return {
        "subscription_id": SUBSCRIPTION,
        "resource_group": "batchai.horovod",
        "location": "eastus",
        "credential": credential,
        "storage_account": ACCOUNT,
        "ssh_source_cidr": "203.0.113.7/32",
        "state_dir": tmp_path / "state",
        "polling_interval": 0,
        "retry_total": 3,
        "retry_backoff_factor": 0,
        "share_retry_backoff": 0,
    }


def all_messages(exc: BaseException) -> str:
    """Every message of an exception and of its chain (what a traceback would show)."""
    return "".join(traceback.format_exception(exc))
