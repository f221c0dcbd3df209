"""Cost estimates: pure functions of a price per node-hour, node counts and times.

A price of ``None`` means unknown (offline, or a size the Retail Prices API does not list) and every
estimate made from it is ``None`` too, shown as ``"unknown"`` — never a guess. Local and SSH clusters
cost 0 unless the user set ``price_per_hour`` on the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ._models import ClusterSpec
from .exceptions import NotFoundError, ValidationError

if TYPE_CHECKING:
    from .cluster import Cluster
    from .job import Job
    from .pricing import Price, RetailPrices


class Cost(float):
    """An amount of money that prints as such: ``$0.42`` (a float for arithmetic and comparisons)."""

    currency: str = "USD"

    def __repr__(self) -> str:
        from .pricing import format_price  # pricing (its HTTP client and cache) loads on first use

        return format_price(float(self), self.currency)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return repr(self)


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(timezone.utc)


def job_cost(
    price_per_hour: float | None,
    node_count: int,
    start: datetime | None,
    end_or_now: datetime | None = None,
) -> float | None:
    """``price × nodes × hours`` from ``start`` to ``end_or_now`` (now when None); None when the price
    is unknown. A job that has not started costs 0."""
    if price_per_hour is None:
        return None
    if start is None:
        return 0.0
    seconds = max(0.0, (_now(end_or_now) - start).total_seconds())
    return price_per_hour * node_count * seconds / 3600.0


def node_hours(counts: Sequence[tuple[datetime, int]], now: datetime | None = None) -> float:
    """Node-hours of a cluster whose node count changed at the given times (a step function: each count
    holds from its time to the next; the last until ``now``). Unordered input is sorted."""
    points = sorted(counts, key=lambda p: p[0])
    if not points:
        return 0.0
    total = 0.0
    for (t0, n), (t1, _) in zip(points, [*points[1:], (_now(now), 0)], strict=True):
        total += max(0, n) * max(0.0, (t1 - t0).total_seconds())
    return total / 3600.0


def node_hours_of_intervals(
    intervals: Iterable[tuple[datetime, datetime | None]], now: datetime | None = None
) -> float:
    """Node-hours from each node's (up since, gone at or None while up)."""
    end = _now(now)
    return sum(max(0.0, ((stop or end) - start).total_seconds()) for start, stop in intervals) / 3600.0


def cluster_cost_so_far(price_per_hour: float | None, hours: float) -> float | None:
    """``price × node-hours`` (see ``node_hours``); None when the price is unknown."""
    return None if price_per_hour is None else price_per_hour * hours


def format_cost(value: float | None, currency: str = "USD") -> str:
    """``"$1.23 est."`` / ``"unknown"`` — what reprs, ``cluster show`` and ``job show`` print."""
    from .pricing import format_price

    return "unknown" if value is None else f"{format_price(value, currency)} est."


def cluster_price(
    spec: ClusterSpec, backend_kind: str, region: str | None, *, client: RetailPrices | None = None
) -> Price | None:
    """A cluster's price per node-hour: the user's ``price_per_hour`` when set; else on Azure the Retail
    Prices API's (None when unknown); else 0 (local and SSH machines are the user's own)."""
    from .pricing import Price, default_client

    if spec.price_per_hour is not None:
        return Price(spec.price_per_hour, "USD", "user")
    if backend_kind != "azure":
        return Price(0.0, "USD", backend_kind)
    if not region:
        return None
    return (client or default_client()).price_per_hour(spec.vm_size, region, spec.vm_priority)


def backend_region(backend: Any) -> str | None:
    """The Azure region of a backend (``backend.names.location``), None for the others."""
    names = getattr(backend, "names", None)
    location = getattr(names, "location", None)
    return location if isinstance(location, str) else None


def price_of_cluster(cluster: Cluster, *, client: RetailPrices | None = None) -> Price | None:
    """``Cluster.price_per_hour``: ``cluster_price`` for the cluster's spec on its workspace's backend."""
    backend = cluster.workspace.backend
    return cluster_price(cluster.spec, backend.kind, backend_region(backend), client=client)


def cost_of_job(job: Job, *, client: RetailPrices | None = None) -> Cost | None:
    """``Job.cost``: the estimate so far (to its end once ended); None when the price is unknown or the
    cluster is gone. A job not submitted or not started costs 0."""
    if not job.submitted:
        return Cost(0.0)
    status = job.status
    try:
        cluster = job.workspace.get_cluster(job.spec.cluster)
    except NotFoundError:
        return None
    price = price_of_cluster(cluster, client=client)
    end = (status.end_time or status.heartbeat) if status.state.ended else None
    if status.state.ended and end is None and status.start_time is not None:
        return None  # ended at an unknown time
    value = job_cost(price.value if price else None, job.spec.node_count, status.start_time, end)
    return None if value is None else Cost(value)


def estimate_job_cost(
    job: Job, hours: float | None = None, *, client: RetailPrices | None = None
) -> Cost | None:
    """``Job.estimate_cost``: price per node-hour × the job's nodes × ``hours`` (default: its
    ``max_wall_clock_time``, else one hour); None when the cluster's price is unknown."""
    cluster = job.workspace.get_cluster(job.spec.cluster)
    price = price_of_cluster(cluster, client=client)
    if price is None:
        return None
    if hours is None:
        limit = job.spec.max_wall_clock_seconds
        hours = limit / 3600.0 if limit else 1.0
    if isinstance(hours, bool) or not isinstance(hours, int | float) or hours < 0:
        raise ValidationError("hours", hours, "a number of hours >= 0")
    return Cost(price.value * job.spec.node_count * float(hours))
