"""Prices of Azure VM sizes from the Azure Retail Prices API (public, no authentication).

``price_per_hour("Standard_NC4as_T4_v3", "eastus", "dedicated")`` → ``Price(0.526, "USD", ...)`` per node
and hour, Linux, pay-as-you-go (``lowpriority`` clusters run as Spot VMs: the Spot meter). When the API
cannot be reached, or has no such size in the region, the answer is ``None`` — "unknown", never a guess.

Answers are cached in memory and on disk (``~/.cache/batchai_sdk/prices.json``, or under
``BATCHAI_CACHE_DIR`` / ``XDG_CACHE_HOME``) for a day; a failed lookup is not cached, so the next call
tries again. ``BATCHAI_PRICES_URL`` points the client at another server (the tests' local one).

HTTP goes through ``requests`` (imported on first use): it is already installed with the ``azure`` extra
(azure-core's transport) and is listed in the core dependencies so that prices work on every backend.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ._models import VmPriority
from .exceptions import ValidationError

log = logging.getLogger(__name__)

DEFAULT_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
DEFAULT_TTL = 24 * 3600.0
MAX_PAGES = 20  # one size in one region is 1-3 pages; a runaway NextPageLink chain stops here
SOURCE = "Azure Retail Prices API"


@dataclass(frozen=True)
class Price:
    """A price per node and hour."""

    value: float
    currency: str
    source: str  # "Azure Retail Prices API", "user", "local"
    fetched_at: datetime | None = None

    def __str__(self) -> str:
        return format_price(self.value, self.currency) + "/h"


def format_price(value: float, currency: str = "USD") -> str:
    return f"${value:,.2f}" if currency == "USD" else f"{value:,.2f} {currency}"


class _Retryable(Exception):
    """A 429/5xx answer or a transport error: worth another try."""


def default_cache_path() -> Path:
    root = os.environ.get("BATCHAI_CACHE_DIR")
    if root:
        return Path(root) / "prices.json"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "batchai_sdk" / "prices.json"


def _priority(priority: str | VmPriority) -> VmPriority:
    try:
        return VmPriority(str(priority).lower())
    except ValueError:
        raise ValidationError("priority", priority, "'dedicated' or 'lowpriority'") from None


def _key(vm_size: str, region: str, currency: str) -> str:
    return f"{region.strip().lower()}|{vm_size.strip().lower()}|{currency.upper()}"


def select_prices(items: list[Mapping[str, Any]], vm_size: str, region: str) -> dict[str, float]:
    """From Retail Prices items, the Linux pay-as-you-go hourly prices: ``{"dedicated": ..., "spot": ...}``
    (a priority absent when the API lists none). The newest ``effectiveStartDate`` wins."""
    best: dict[str, tuple[str, float]] = {}
    for item in items:
        if str(item.get("armSkuName", "")).lower() != vm_size.lower():
            continue
        if str(item.get("armRegionName", "")).lower() != region.lower():
            continue
        if item.get("type") != "Consumption" or item.get("unitOfMeasure") != "1 Hour":
            continue
        if "windows" in str(item.get("productName", "")).lower():
            continue
        sku = str(item.get("skuName", ""))
        if "Low Priority" in sku:
            continue  # the legacy low-priority meter; our low-priority nodes are Spot VMs
        price = item.get("retailPrice")
        if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
            continue
        kind = "spot" if "Spot" in sku else "dedicated"
        start = str(item.get("effectiveStartDate", ""))
        if kind not in best or start > best[kind][0]:
            best[kind] = (start, float(price))
    return {kind: value for kind, (_, value) in best.items()}


class RetailPrices:
    """A client of the Retail Prices API with a memory and a disk cache. Thread-safe."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        cache_path: Path | str | None = None,
        ttl: float = DEFAULT_TTL,
        timeout: float = 10.0,
        attempts: int = 3,
        backoff: float = 0.5,
        currency: str = "USD",
    ) -> None:
        self.base_url = base_url or os.environ.get("BATCHAI_PRICES_URL") or DEFAULT_URL
        self.cache_path = Path(cache_path) if cache_path is not None else default_cache_path()
        self.ttl = ttl
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.currency = currency.upper()
        self._memory: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._session: Any = None

    def price_per_hour(
        self, vm_size: str, region: str, priority: str | VmPriority = VmPriority.DEDICATED
    ) -> Price | None:
        """The price of one VM of ``vm_size`` in ``region`` per hour, or None when unknown (offline,
        no such size in that region)."""
        kind = "spot" if _priority(priority) is VmPriority.LOWPRIORITY else "dedicated"
        if not vm_size or not region:
            return None
        entry = self._entry(vm_size, region)
        if entry is None or kind not in entry["prices"]:
            return None
        return Price(
            float(entry["prices"][kind]),
            entry["currency"],
            SOURCE,
            datetime.fromisoformat(entry["fetched_at"]),
        )

    # -- cache ------------------------------------------------------------------------------------------
    def _fresh(self, entry: Mapping[str, Any] | None) -> bool:
        if not entry:
            return False
        try:
            fetched = datetime.fromisoformat(entry["fetched_at"])
        except (KeyError, TypeError, ValueError):
            return False
        return datetime.now(timezone.utc) - fetched < timedelta(seconds=self.ttl)

    def _entry(self, vm_size: str, region: str) -> dict[str, Any] | None:
        key = _key(vm_size, region, self.currency)
        with self._lock:
            entry = self._memory.get(key)
            if self._fresh(entry):
                return entry
            stored = self._read_disk().get(key)
            if isinstance(stored, dict) and self._fresh(stored) and isinstance(stored.get("prices"), dict):
                self._memory[key] = stored
                return stored
        items = self._fetch(vm_size, region)
        if items is None:
            return None  # not cached: the next call tries again
        entry = {
            "fetched_at": datetime.now(timezone.utc).isoformat(),
            "currency": self.currency,
            "prices": select_prices(items, vm_size, region),
        }
        with self._lock:
            self._memory[key] = entry
            self._write_disk(key, entry)
        return entry

    def _read_disk(self) -> dict[str, Any]:
        try:
            data = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        entries = data.get("entries") if isinstance(data, dict) else None
        return entries if isinstance(entries, dict) else {}

    def _write_disk(self, key: str, entry: Mapping[str, Any]) -> None:
        entries = self._read_disk()
        entries[key] = dict(entry)
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.cache_path.parent, prefix=".prices.", suffix=".part")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "entries": entries}, fh)
            os.replace(tmp, self.cache_path)
        except OSError as exc:  # a read-only home: the memory cache still works
            log.debug("price cache not written to %s: %s", self.cache_path, exc)

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
            try:
                self.cache_path.unlink()
            except FileNotFoundError:
                pass

    # -- HTTP -------------------------------------------------------------------------------------------
    def _filter(self, vm_size: str, region: str) -> str:
        def quote(value: str) -> str:
            return "'" + value.replace("'", "''") + "'"

        return (
            f"serviceName eq 'Virtual Machines' and priceType eq 'Consumption'"
            f" and armRegionName eq {quote(region.strip().lower())}"
            f" and armSkuName eq {quote(vm_size.strip())}"
        )

    def _pages(self, vm_size: str, region: str) -> Iterator[Mapping[str, Any]]:
        import requests

        params: dict[str, str] | None = {
            "api-version": API_VERSION,
            "currencyCode": self.currency,
            "$filter": self._filter(vm_size, region),
        }
        url: str | None = self.base_url
        with requests.Session() as session:
            session.headers["User-Agent"] = "batchai_sdk"
            for _ in range(MAX_PAGES):
                if url is None:
                    return
                page = self._get(session, url, params)
                yield page
                link = page.get("NextPageLink")
                url, params = (str(link), None) if link else (None, None)

    def _get(self, session: Any, url: str, params: Mapping[str, str] | None) -> Mapping[str, Any]:
        import requests

        def once() -> Mapping[str, Any]:
            try:
                resp = session.get(url, params=params, timeout=(min(3.05, self.timeout), self.timeout))
            except requests.RequestException as exc:
                raise _Retryable(f"{type(exc).__name__}") from exc
            if resp.status_code == 429 or resp.status_code >= 500:
                raise _Retryable(f"HTTP {resp.status_code}")
            resp.raise_for_status()
            data = resp.json()
            if not isinstance(data, dict) or not isinstance(data.get("Items"), list):
                raise ValueError("not a Retail Prices page (no Items list)")
            return data

        # imported here: tenacity pulls in asyncio (tens of ms), and most sessions never ask for a price
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff, max=4 * self.backoff),
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        result: Mapping[str, Any] = retrying(once)
        return result

    def _fetch(self, vm_size: str, region: str) -> list[Mapping[str, Any]] | None:
        """Every item for the size in the region, across pages; None when the API cannot answer."""
        import requests

        items: list[Mapping[str, Any]] = []
        try:
            for page in self._pages(vm_size, region):
                items.extend(i for i in page["Items"] if isinstance(i, dict))
        except (_Retryable, requests.RequestException, ValueError) as exc:
            log.info(
                "price of %s in %s unknown: the Retail Prices API did not answer (%s)", vm_size, region, exc
            )
            return None
        return items


_default: RetailPrices | None = None
_default_lock = threading.Lock()


def default_client() -> RetailPrices:
    global _default
    with _default_lock:
        if _default is None:
            _default = RetailPrices()
        return _default


def price_per_hour(
    vm_size: str, region: str, priority: str | VmPriority = VmPriority.DEDICATED
) -> Price | None:
    """The Azure price of one VM per hour (Linux, pay-as-you-go; Spot for ``lowpriority``), or None."""
    return default_client().price_per_hour(vm_size, region, priority)
