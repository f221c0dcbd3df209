"""The cluster as its scheduler sees it: the configuration the last request carried (kept in the
``Store``), every node it may have (the pool), the nodes up now, and its folder on the share, where the
decisions about its nodes are logged (``events.jsonl``).

Which nodes are up is this part's own state: with autoscale, ``scaling.AutoScaler`` sets it, and a new
configuration drops what left the pool; without autoscale the configuration's nodes are all up.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..common import now
from ..policy import autoscale
from ..protocol.cluster import ClusterConfig, NodeConfig
from ..protocol.paths import EVENTS_RECORD, SharePaths
from .log import log
from .store import Store


class Cluster:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.active: list[str] | None = None  # with autoscale: the nodes up now (a subset of the pool)

    @property
    def cfg(self) -> ClusterConfig:
        return self.store.cfg

    def configure(self, cfg: ClusterConfig) -> bool:
        """Take the configuration a request carried; False when it is the one in force."""
        if not self.store.save_cluster(cfg):
            return False
        if self.settings() is None:
            self.active = None
        elif self.active is not None:  # ours is the truth of which nodes are up; drop what left the pool
            pool = {n["id"] for n in self.pool()}
            self.active = [n for n in self.active if n in pool]
        return True

    def settings(self) -> autoscale.AutoScaleSettings | None:
        """The cluster's autoscale settings, or None when its size is fixed."""
        data = self.cfg.get("autoscale")
        return autoscale.AutoScaleSettings.from_dict(data) if data else None

    def pool(self) -> list[NodeConfig]:
        """Every node the cluster may have: its nodes, or with autoscale every node up to max_nodes."""
        return list(self.cfg.get("pool") or self.cfg.get("nodes", []))

    def nodes(self) -> list[NodeConfig]:
        """The nodes up now."""
        if self.settings() is None:
            return list(self.cfg.get("nodes", []))
        if self.active is None:
            self.active = [n["id"] for n in self.cfg.get("nodes", [])]
        return [n for n in self.pool() if n["id"] in self.active]

    def scale_to(self, node_ids: list[str]) -> None:
        """Autoscale's decision: these nodes (of the pool) are up now."""
        self.active = node_ids

    def capacity(self) -> int:
        """The most nodes a job may ask for: the cluster's size, or max_nodes with autoscale."""
        settings = self.settings()
        return settings.max_nodes if settings is not None else len(self.nodes())

    def share_paths(self) -> SharePaths:
        """The share's paths as this head node sees them (node/protocol/paths.py)."""
        return SharePaths.at_meta(self.cfg["meta_root"])

    def event(self, fields: dict[str, Any], label: str = "autoscale") -> None:
        """One decision (autoscale's, the health gate's) in the log and in the cluster's ``events.jsonl``."""
        line = json.dumps({"time": now(), **fields}, sort_keys=True)
        log(f"{label}: {line}")
        try:
            with open(os.path.join(self.cfg["cluster_dir"], EVENTS_RECORD), "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as exc:
            log(f"cannot write the event log yet: {exc}")
