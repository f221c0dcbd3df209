"""Azure SDK errors → ``AzureError`` with the ARM code and message, and a hint when the fix is known.

Messages are built from the ARM error body only (never from request headers or URLs with query strings)
and then scrubbed of anything shaped like a token, a SAS signature or an account key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ...exceptions import AzureError, AzureQuotaError, BatchAIError
from . import _sdk

_SCRUB = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9\-_.~+/]+=*"), r"\1***"),
    (re.compile(r"(?i)\b(sig|se|sv|sp|skoid|sktid|skt|ske|sks|skv|st|spr|srt|ss)=[^&\s'\"]+"), r"\1=***"),
    (re.compile(r"(?i)(AccountKey=)[^;\s'\"]+"), r"\1***"),
    (re.compile(r"(?i)(SharedKey(?:Lite)?\s+[^:\s]+:)[A-Za-z0-9+/=]+"), r"\1***"),
    (re.compile(r"(?i)(password[\"']?\s*[:=]\s*[\"']?)[^\s,\"'}]+"), r"\1***"),
    # JWTs (access tokens) wherever they appear
    (re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"), "***"),
]


def scrub(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with tokens, signatures, keys and the given secret values replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    for pattern, repl in _SCRUB:
        text = pattern.sub(repl, text)
    return text


def _quota_hint(code: str, message: str) -> str | None:
    lowered = message.lower()
    if code == "SkuNotAvailable" or "skunotavailable" in lowered:
        return (
            "this VM size is not offered to your subscription in this region: choose another vm_size or "
            "location (see `az vm list-skus --location <region> --size Standard_N --output table`)"
        )
    quota = code in ("QuotaExceeded", "OperationNotAllowed") and (
        "quota" in lowered or code == "QuotaExceeded"
    )
    if quota or ("quota" in lowered and code in ("InvalidTemplateDeployment", "BadRequest")):
        spot = "lowpriority" in lowered or "spot" in lowered
        family = "the Spot (low-priority) vCPU quota" if spot else "the vCPU quota of this VM family"
        return (
            "the cluster needs more vCPUs than the subscription's quota allows: ask for fewer nodes or a "
            f"smaller vm_size, use another location, or request more of {family} in that region "
            "(Azure portal → Subscriptions → Usage + quotas, or `az vm list-usage --location <region>`)"
        )
    if code in (
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "SkuNotAvailableForAllocation",
    ):
        return (
            "Azure has no capacity for this VM size here right now: retry later, or choose another vm_size "
            "or location; low-priority (Spot) capacity is scarcer than dedicated"
        )
    return None


_CHECK_SUBSCRIPTION = "check subscription_id / AZURE_SUBSCRIPTION_ID (`az account list --output table`)"
_OTHER_HINTS = {
    "AuthorizationFailed": "the identity needs the Contributor role on the subscription or resource group",
    "MissingSubscriptionRegistration": (
        "register the resource provider once: `az provider register --namespace <namespace from the message>`"
    ),
    "StorageAccountAlreadyTaken": "storage account names are global: pass storage_account='<another name>'",
    "SubscriptionNotFound": _CHECK_SUBSCRIPTION,
    "InvalidSubscriptionId": _CHECK_SUBSCRIPTION,
}


def _walk_error(error: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(code, message) of an ARM error and its nested ``details``, outermost first."""
    code = str(error.get("code") or "")
    message = str(error.get("message") or "")
    if code or message:
        yield code, message
    for detail in error.get("details") or ():
        if isinstance(detail, Mapping):
            yield from _walk_error(detail)


def json_mapping(body: Any) -> Mapping[str, Any] | None:
    """An error body (REST JSON text, bytes or an already parsed dict) as a mapping; None if it is none."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except (ValueError, TypeError):
            return None
    return body if isinstance(body, Mapping) else None


def arm_error(body: Any) -> tuple[str | None, str | None]:
    """The most specific (code, message) in an ARM error body (``{"error": {...}}`` or the error itself)."""
    body = json_mapping(body)
    if body is None:
        return None, None
    inner = body.get("error")
    error: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
    pairs = [p for p in _walk_error(error) if p[0]]
    if not pairs:
        return None, None
    # A generic outer code ("DeploymentFailed", "OperationNotAllowed") often wraps the telling one.
    for code, message in reversed(pairs):
        if _quota_hint(code, message):
            return code, message
    return pairs[0]


def _code_and_message(exc: Any) -> tuple[str | None, str | None]:
    code: str | None = None
    message: str | None = None
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            code, message = arm_error(response.text())
        except Exception:
            code, message = None, None
    odata = getattr(exc, "error", None)
    if code is None and odata is not None and getattr(odata, "code", None):
        code, message = str(odata.code), str(getattr(odata, "message", "") or "")
    if code is None:
        raw = getattr(exc, "error_code", None) or None  # azure-storage sets a StorageErrorCode
        code = str(getattr(raw, "value", raw)) if raw is not None else None
    if message is None:
        message = getattr(exc, "message", None) or str(exc)
        message = message.split("\n")[0] if code else message
    return code, message


def translate(exc: BaseException, operation: str, *, secrets: tuple[str, ...] = ()) -> AzureError:
    """One AzureError for an azure-core exception raised while doing ``operation``."""
    ex = _sdk.core_exceptions()
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, ex.ClientAuthenticationError) and status is None:
        text = scrub(str(exc).split("\n")[0], secrets)
        return AzureError(
            f"{operation}: no Azure credential could get a token ({text}); sign in with `az login` or set "
            "AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET",
            code="AuthenticationFailed",
        )
    if isinstance(exc, ex.ServiceRequestError):
        reason = scrub(_reason(exc), secrets)
        return AzureError(
            f"{operation}: Azure is unreachable ({reason}); check the network or proxy settings",
            code="ServiceUnreachable",
        )
    if isinstance(exc, ex.ServiceResponseError):
        reason = scrub(_reason(exc), secrets)
        return AzureError(
            f"{operation}: the connection to Azure broke ({reason})", code="ServiceResponseError"
        )
    code, message = _code_and_message(exc)
    text = scrub(f"{operation} failed: {code + ': ' if code else ''}{message or type(exc).__name__}", secrets)
    hint = _quota_hint(code or "", message or "")
    if hint is not None:
        return AzureQuotaError(f"{text} — {hint}", code=code, status=status, hint=hint)
    extra = _OTHER_HINTS.get(code or "")
    if extra:
        text = f"{text} — {extra}"
    return AzureError(text, code=code, status=status)


def _reason(exc: BaseException) -> str:
    """A short reason from a transport error, without the URL (which may carry a query string)."""
    inner: BaseException | None = getattr(exc, "inner_exception", None) or exc.__cause__
    text = str(inner or exc)
    text = re.sub(r"(?i)(url|with url):\s*\S+", r"\1: <redacted>", text)
    text = re.sub(r"https?://\S+", "<url>", text)
    return text.split("\n")[0][:300]


def is_not_found(exc: BaseException) -> bool:
    """A 404 from the SDK, or our translation of one."""
    if isinstance(exc, AzureError):
        return exc.status == 404 or exc.code in ("ResourceNotFound", "ResourceGroupNotFound", "NotFound")
    ex = _sdk.core_exceptions()
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(exc, ex.ResourceNotFoundError) or (
        isinstance(exc, ex.HttpResponseError) and status == 404
    )


def call_or_none(operation: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with errors translated; None when the resource does not exist (404)."""
    try:
        with azure_call(operation):
            return fn(*args, **kwargs)
    except AzureError as exc:
        if is_not_found(exc):
            return None
        raise


@contextmanager
def azure_call(operation: str, *, secrets: tuple[str, ...] = ()) -> Iterator[None]:
    """Translate any azure-core error raised inside to AzureError (``raise ... from exc``)."""
    try:
        yield
    except BatchAIError:
        raise
    except Exception as exc:
        ex = _sdk.core_exceptions()
        if isinstance(exc, ex.AzureError):
            raise translate(exc, operation, secrets=secrets) from exc
        raise
