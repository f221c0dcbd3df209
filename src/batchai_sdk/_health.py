"""The health gate's report as the client reads it: each check with its line, and the nodes kept out.

The gate itself runs on the head node (``node/gate``); ``Cluster.check_nodes`` runs it by hand and the
cluster's scheduler runs it when nodes join (``health_check`` on the cluster) and before a job that asks
for it. See docs/health.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HealthCheck:
    """One check of one node (or link): its name, pass or fail, and the value against what was expected."""

    node: str  # a node id, or "node-a<->node-b" for a link
    name: str  # gpu-count, gpu0-ecc, gpu0-throttle, dcgm-diag, nhc, allreduce, link-allreduce, ...
    ok: bool
    detail: str

    @property
    def line(self) -> str:
        """``node-1 allreduce busbw=212.30GB/s < 400 FAIL``: the check as one line."""
        return f"{self.node} {self.name} {self.detail} {'OK' if self.ok else 'FAIL'}"


@dataclass(frozen=True)
class HealthReport:
    """One run of the health gate over a cluster's nodes: every check, and the nodes kept out and why."""

    level: str
    nodes: tuple[str, ...]
    checks: tuple[HealthCheck, ...]
    unusable: Mapping[str, str] = field(default_factory=dict)  # node -> its failed checks' lines
    notes: tuple[str, ...] = ()  # what was skipped and why (e.g. no torch on a node)
    seconds: float = 0.0

    @property
    def healthy(self) -> tuple[str, ...]:
        """The nodes that passed every check."""
        return tuple(n for n in self.nodes if n not in self.unusable)

    @property
    def failed(self) -> tuple[HealthCheck, ...]:
        """The checks that failed."""
        return tuple(c for c in self.checks if not c.ok)

    def __str__(self) -> str:
        return "\n".join([*(c.line for c in self.checks), *(f"note: {n}" for n in self.notes)])

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> HealthReport:
        """The report from its JSON (a file of the cluster's ``health/`` folder)."""
        checks = tuple(
            HealthCheck(str(c["node"]), str(c["name"]), bool(c["ok"]), str(c["detail"]))
            for c in doc.get("checks") or []
        )
        return cls(
            level=str(doc.get("level", "")),
            nodes=tuple(str(n) for n in doc.get("nodes") or []),
            checks=checks,
            unusable={str(k): str(v) for k, v in (doc.get("unusable") or {}).items()},
            notes=tuple(str(n) for n in doc.get("notes") or []),
            seconds=float(doc.get("seconds") or 0.0),
        )
