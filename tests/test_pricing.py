"""Retail Prices client (pricing.py) against a local HTTP server serving real-shaped API pages, and the
cost estimates (cost.py)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from batchai_sdk._models import ClusterSpec
from batchai_sdk.cost import (
    backend_region,
    cluster_cost_so_far,
    cluster_price,
    format_cost,
    job_cost,
    node_hours,
    node_hours_of_intervals,
)
from batchai_sdk.exceptions import ValidationError
from batchai_sdk.pricing import RetailPrices, select_prices


def item(
    sku: str,
    region: str,
    price: float,
    sku_name: str,
    *,
    product: str = "NCasT4_v3 Series",
    unit: str = "1 Hour",
    type_: str = "Consumption",
    start: str = "2020-08-01T00:00:00Z",
) -> dict[str, Any]:
    """One item of the Retail Prices API, every field as the API sends it."""
    return {
        "currencyCode": "USD",
        "tierMinimumUnits": 0.0,
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": region,
        "location": "US East" if region == "eastus" else region,
        "effectiveStartDate": start,
        "meterId": "a1b2c3d4-0000-4000-8000-" + f"{abs(hash((sku, sku_name, product))) % 10**12:012d}",
        "meterName": sku_name,
        "productId": "DZH318Z08M22",
        "skuId": "DZH318Z08M22/00" + str(len(sku_name)),
        "productName": product,
        "skuName": sku_name,
        "serviceName": "Virtual Machines",
        "serviceId": "DZH313Z7MMC8",
        "serviceFamily": "Compute",
        "unitOfMeasure": unit,
        "type": type_,
        "isPrimaryMeterRegion": True,
        "armSkuName": sku,
    }


T4 = "Standard_NC4as_T4_v3"
ITEMS = [
    item(T4, "eastus", 0.526, "NC4as T4 v3"),
    item(T4, "eastus", 0.1578, "NC4as T4 v3 Spot"),
    item(T4, "eastus", 0.105, "NC4as T4 v3 Low Priority"),
    item(T4, "eastus", 0.71, "NC4as T4 v3", product="NCasT4_v3 Series Windows"),
    item(T4, "eastus", 0.2, "NC4as T4 v3 Spot", product="NCasT4_v3 Series Windows"),
    item(T4, "eastus", 2765.0, "NC4as T4 v3", type_="Reservation", unit="1 Year"),
    item(T4, "eastus", 0.48, "NC4as T4 v3", start="2019-01-01T00:00:00Z"),  # an older price
]


class PricesServer:
    """The Retail Prices API on 127.0.0.1: filters by armSkuName/armRegionName, pages with $skip."""

    def __init__(self, items: list[dict[str, Any]], page_size: int = 3) -> None:
        self.items = items
        self.page_size = page_size
        self.requests: list[dict[str, str]] = []
        self.fail_next: list[int] = []  # statuses to answer before serving
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.requests.append(query)
                if server.fail_next:
                    self.send_response(server.fail_next.pop(0))
                    self.end_headers()
                    return
                flt = query.get("$filter", "")
                matches = [
                    i
                    for i in server.items
                    if f"armSkuName eq '{i['armSkuName']}'" in flt
                    and f"armRegionName eq '{i['armRegionName']}'" in flt
                ]
                skip = int(query.get("$skip", "0"))
                page = matches[skip : skip + server.page_size]
                body: dict[str, Any] = {
                    "BillingCurrency": "USD",
                    "CustomerEntityId": "Default",
                    "CustomerEntityType": "Retail",
                    "Items": page,
                    "NextPageLink": None,
                    "Count": len(page),
                }
                if skip + server.page_size < len(matches):
                    body["NextPageLink"] = (
                        f"{server.url}?currencyCode='USD'&$filter={flt.replace(' ', '%20')}"
                        f"&$skip={skip + server.page_size}"
                    )
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/retail/prices"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[PricesServer]:
    s = PricesServer(list(ITEMS))
    yield s
    s.close()


def client(url: str, tmp_path: Path, **kw: Any) -> RetailPrices:
    return RetailPrices(base_url=url, cache_path=tmp_path / "cache" / "prices.json", backoff=0, **kw)


def test_dedicated_and_spot_across_pages(server: PricesServer, tmp_path: Path) -> None:
    c = client(server.url, tmp_path)
    price = c.price_per_hour(T4, "eastus", "dedicated")
    assert price is not None and price.value == 0.526 and price.currency == "USD"
    assert price.source == "Azure Retail Prices API" and price.fetched_at is not None
    assert str(price) == "$0.53/h"
    spot = c.price_per_hour(T4, "EastUS", "lowpriority")
    assert spot is not None and spot.value == 0.1578
    # 7 items in pages of 3: three requests, the later ones through NextPageLink
    assert len(server.requests) == 3 and [r.get("$skip") for r in server.requests] == [None, "3", "6"]
    flt = server.requests[0]["$filter"]
    assert "armSkuName eq 'Standard_NC4as_T4_v3'" in flt and "armRegionName eq 'eastus'" in flt
    assert "serviceName eq 'Virtual Machines'" in flt and "priceType eq 'Consumption'" in flt


def test_memory_and_disk_cache(server: PricesServer, tmp_path: Path) -> None:
    c = client(server.url, tmp_path)
    assert c.price_per_hour(T4, "eastus") is not None
    served = len(server.requests)
    assert c.price_per_hour(T4, "eastus", "lowpriority") is not None
    assert len(server.requests) == served  # memory
    again = client(server.url, tmp_path)
    assert again.price_per_hour(T4, "eastus").value == 0.526  # type: ignore[union-attr]
    assert len(server.requests) == served  # disk
    cached = json.loads((tmp_path / "cache" / "prices.json").read_text())
    assert cached["entries"]["eastus|standard_nc4as_t4_v3|USD"]["prices"] == {
        "dedicated": 0.526,
        "spot": 0.1578,
    }


def test_expired_cache_is_refetched(server: PricesServer, tmp_path: Path) -> None:
    c = client(server.url, tmp_path, ttl=0)
    c.price_per_hour(T4, "eastus")
    served = len(server.requests)
    c.price_per_hour(T4, "eastus")
    assert len(server.requests) == 2 * served


def test_unknown_size_or_region_is_none(server: PricesServer, tmp_path: Path) -> None:
    c = client(server.url, tmp_path)
    assert c.price_per_hour("Standard_NC6", "eastus") is None
    assert c.price_per_hour(T4, "westeurope") is None


def test_offline_is_none_quickly_and_not_cached(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = client(f"http://127.0.0.1:{port}/api/retail/prices", tmp_path, timeout=2, attempts=2)
    started = datetime.now(timezone.utc)
    assert c.price_per_hour(T4, "eastus") is None
    assert (datetime.now(timezone.utc) - started).total_seconds() < 5
    assert not (tmp_path / "cache" / "prices.json").exists()
    # the same client tries again once the API answers
    s2 = PricesServer(list(ITEMS))
    try:
        c.base_url = s2.url
        assert c.price_per_hour(T4, "eastus") is not None
    finally:
        s2.close()


def test_server_errors_are_retried(server: PricesServer, tmp_path: Path) -> None:
    server.fail_next = [503, 429]
    assert client(server.url, tmp_path).price_per_hour(T4, "eastus") is not None
    server.fail_next = [500, 500, 500]
    assert client(server.url, tmp_path / "other", attempts=3).price_per_hour(T4, "eastus") is None


def test_client_error_is_unknown(server: PricesServer, tmp_path: Path) -> None:
    server.fail_next = [400]
    assert client(server.url, tmp_path, attempts=3).price_per_hour(T4, "eastus") is None
    assert len(server.requests) == 1  # a 400 is not retried


def test_env_sets_the_url_and_cache_dir(
    server: PricesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCHAI_PRICES_URL", server.url)
    monkeypatch.setenv("BATCHAI_CACHE_DIR", str(tmp_path / "c"))
    c = RetailPrices(backoff=0)
    assert c.cache_path == tmp_path / "c" / "prices.json"
    assert c.price_per_hour(T4, "eastus") is not None and server.requests


def test_corrupt_cache_is_ignored(server: PricesServer, tmp_path: Path) -> None:
    path = tmp_path / "cache" / "prices.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert client(server.url, tmp_path).price_per_hour(T4, "eastus") is not None


def test_bad_priority_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        client("http://127.0.0.1:9/", tmp_path).price_per_hour(T4, "eastus", "spotty")


def test_select_prices_newest_wins() -> None:
    assert select_prices(ITEMS, T4, "eastus") == {"dedicated": 0.526, "spot": 0.1578}
    assert select_prices(ITEMS[3:5], T4, "eastus") == {}  # Windows only


# -- estimates -----------------------------------------------------------------------------------------------
T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def test_job_cost() -> None:
    assert job_cost(2.0, 4, T0, T0 + timedelta(minutes=30)) == pytest.approx(4.0)
    assert job_cost(None, 4, T0, T0 + timedelta(hours=1)) is None
    assert job_cost(2.0, 4, None) == 0.0
    running = job_cost(3600.0, 1, datetime.now(timezone.utc) - timedelta(seconds=10))
    assert running is not None and 9 <= running <= 60


def test_node_hours_and_cluster_cost() -> None:
    counts = [(T0 + timedelta(hours=1), 0), (T0, 2)]  # 2 nodes for an hour, then none
    assert node_hours(counts, T0 + timedelta(hours=5)) == pytest.approx(2.0)
    assert node_hours([(T0, 3)], T0 + timedelta(minutes=20)) == pytest.approx(1.0)
    assert node_hours([], T0) == 0.0
    hours = node_hours_of_intervals([(T0, T0 + timedelta(hours=1)), (T0, None)], T0 + timedelta(hours=2))
    assert hours == pytest.approx(3.0)
    assert cluster_cost_so_far(0.5, hours) == pytest.approx(1.5)
    assert cluster_cost_so_far(None, hours) is None


def test_format_cost() -> None:
    assert format_cost(1.234) == "$1.23 est."
    assert format_cost(None) == "unknown"
    assert format_cost(1234.5, "EUR") == "1,234.50 EUR est."


def test_cluster_price_by_backend(server: PricesServer, tmp_path: Path) -> None:
    c = client(server.url, tmp_path)
    spec = ClusterSpec("c", T4, 2)
    local = cluster_price(spec, "local", None, client=c)
    assert local is not None and local.value == 0.0 and local.source == "local"
    user = cluster_price(ClusterSpec("c", T4, 2, price_per_hour=1.5), "azure", "eastus", client=c)
    assert user is not None and user.value == 1.5 and user.source == "user"
    assert not server.requests
    azure = cluster_price(ClusterSpec("c", T4, 2, vm_priority="lowpriority"), "azure", "eastus", client=c)  # type: ignore[arg-type]
    assert azure is not None and azure.value == 0.1578
    assert cluster_price(spec, "azure", None, client=c) is None


def test_backend_region() -> None:
    class Names:
        location = "eastus"

    class Backend:
        names = Names()

    assert backend_region(Backend()) == "eastus"
    assert backend_region(object()) is None


# -- the object model on the local backend ---------------------------------------------------------------
def test_local_cluster_price_and_job_cost(tmp_path: Path) -> None:
    from batchai_sdk import Workspace

    ws = Workspace.local(root=str(tmp_path / "ws"))
    free = ws.create_cluster("free", vm_size="Standard_NC6", nodes=1)
    assert free.price_per_hour is not None and free.price_per_hour.value == 0.0
    paid = ws.create_cluster("paid", vm_size="Standard_NC6", nodes=1, price_per_hour=3600.0)  # $1 a second
    assert ws.get_cluster("paid").price_per_hour.value == 3600.0  # type: ignore[union-attr]
    exp = ws.create_experiment("e")
    job = exp.create_job("j", cluster=paid, toolkit="custom", command_line="sleep 1")
    assert job.cost == 0.0  # not submitted
    job.submit().wait(timeout=120)
    cost = job.cost
    st = job.status
    assert st.start_time is not None and st.end_time is not None
    assert cost == pytest.approx((st.end_time - st.start_time).total_seconds(), rel=1e-6)
    assert 1.0 <= cost <= 60.0  # type: ignore[operator]
    assert job.cost == cost  # ended: no longer grows
    ws.get_cluster("paid").delete(force=True)
    assert job.cost is None  # the cluster (and so its price) is gone
