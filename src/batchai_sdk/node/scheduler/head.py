"""Which node's scheduler holds the cluster: the head lease, ``head.json`` in the cluster's folder on the
share. A scheduler that starts on an SSH cluster writes it (the node the client started it on, its pid,
a fresh token); clients call the node it names while that node answers, else the first node that does,
which starts a scheduler there that takes the lease over (docs/survive.md, the head node's loss).

A scheduler that finds the lease taken by another (its node was cut off or thought lost while a client
started one elsewhere) steps down: the new one rebuilt the queue from the share and owns every job now,
so this one ends what its launchers still run, sets its database aside (a later start on this node
rebuilds from the share instead of replaying a stale queue) and exits without publishing anything."""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

from ..common import load_or_none, now, write_json_atomic
from ..protocol.cluster import ClusterConfig
from ..protocol.paths import HEAD_RECORD
from .log import log

CHECK_S = 2.0  # how often a scheduler looks whether its lease was taken over


class HeadLease:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.path = os.path.join(cfg["cluster_dir"], HEAD_RECORD) if cfg.get("cluster_dir") else None
        self.node = cfg.get("head")
        self.token = uuid.uuid4().hex
        self.checked = 0.0
        # only where another node could take over: an SSH cluster whose client said which node this is
        self.held = bool(self.path and self.node and cfg.get("ssh_command"))

    def take(self) -> None:
        """Say on the share that this scheduler holds the cluster now."""
        if not self.held or self.path is None:
            return
        record = {
            "node": self.node,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": now(),
            "token": self.token,
        }
        try:
            write_json_atomic(self.path, record)
        except OSError as exc:  # the share refuses writes: clients keep the first node that answers
            log(f"could not record this node as the cluster's head: {exc}")
            return
        log(f"holds the cluster's head lease on node {self.node}")

    def taken_over(self) -> dict[str, Any] | None:
        """The lease's record when another scheduler took it since (checked every ``CHECK_S``)."""
        if not self.held or self.path is None or time.monotonic() - self.checked < CHECK_S:
            return None
        self.checked = time.monotonic()
        record = load_or_none(self.path)
        if isinstance(record, dict) and record.get("token") not in (None, self.token):
            return record
        return None


def held_elsewhere(cfg: ClusterConfig) -> bool:
    """Whether the lease names another node than this one: a database this node kept is from before the
    cluster's scheduler moved away (it may hold jobs another scheduler ran since) and must not be replayed."""
    lease = HeadLease(cfg)
    if not lease.held or lease.path is None:
        return False
    record = load_or_none(lease.path)
    return isinstance(record, dict) and record.get("node") not in (None, lease.node)
