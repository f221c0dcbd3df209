"""Which node's scheduler holds the cluster: the head lease, ``head.json`` in the cluster's folder on the
share. A scheduler that starts on an SSH cluster takes it (the node it runs on, its pid, a fresh token, an
epoch) and beats it every ``BEAT_S``; clients call the node it names while that node answers, else the first
node that does, which starts a scheduler there that takes the lease over; and each other node's standby
(standby.py) takes it over by itself once the beat stops, with no client (docs/survive.md, the head node's
loss). An idle scheduler that exits says so in the lease (``released``): nothing is to be taken over.

Taking the lease is claiming its next epoch: ``head-<n>.claim`` created exclusively beside ``head.json``
(``O_CREAT|O_EXCL``, atomic on the share), so of two nodes that try at once exactly one gets it.

A scheduler that finds a newer claim than its own (its node was cut off, stalled or thought lost while
another took the cluster over) steps down: the new one rebuilt the queue from the share and owns every job
now, so this one ends what its launchers still run, sets its database aside (a later start on this node
rebuilds from the share instead of replaying a stale queue) and exits without publishing anything."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..common import load_or_none, now, write_json_atomic
from ..protocol.cluster import ClusterConfig
from ..protocol.paths import HEAD_RECORD
from .log import log

CHECK_S = 2.0  # how often a scheduler looks whether its lease was taken over
BEAT_S = 2.0  # how often the head beats its lease (a standby takes it over after standby.STALE_S unchanged)
# a scheduler whose loop has not come round for this long is not beaten for, so a standby takes it over;
# shorter stalls (a loop pass waiting on a node's probe or copy) keep the lease beaten from its own thread
LOOP_STALL_S = 60.0
KEEP_CLAIMS = 4  # the newest claims kept on the share; older ones are removed by the one who claims
_CLAIM = re.compile(r"^head-([0-9]{1,12})\.claim$")


def claim_path(cluster_dir: str, epoch: int) -> str:
    return os.path.join(cluster_dir, f"head-{int(epoch)}.claim")


def newest_claim(cluster_dir: str) -> int:
    """The highest epoch claimed in the cluster's folder (0: none yet)."""
    try:
        names = os.listdir(cluster_dir)
    except OSError:
        return 0
    epochs = [int(m.group(1)) for m in map(_CLAIM.match, names) if m]
    return max(epochs, default=0)


def claim(cluster_dir: str, epoch: int, node: str) -> bool:
    """Claim ``epoch`` of the head lease for ``node``: True for the one caller that created its claim file
    (every other gets False); older claims are removed. OSError: the share refuses the write."""
    try:
        fd = os.open(claim_path(cluster_dir, epoch), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"node": node, "host": socket.gethostname(), "pid": os.getpid(), "at": now()}, f)
    if newest_claim(cluster_dir) > epoch:  # claimed past this one meanwhile (a reader of an old listing)
        return False
    for old in range(max(0, epoch - KEEP_CLAIMS - 8), epoch - KEEP_CLAIMS + 1):
        with contextlib.suppress(OSError):
            os.unlink(claim_path(cluster_dir, old))
    return True


def epoch_of(record: Any) -> int | None:
    value = record.get("epoch") if isinstance(record, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class HeadLease:
    def __init__(self, cfg: ClusterConfig) -> None:
        self.cluster_dir = cfg.get("cluster_dir")
        self.path = os.path.join(self.cluster_dir, HEAD_RECORD) if self.cluster_dir else None
        self.node = cfg.get("head")
        self.token = uuid.uuid4().hex
        self.epoch = 0
        self.started = now()
        self.checked = 0.0
        self.beaten = 0.0
        self.lock = threading.RLock()  # the loop (step-down, release) and the beating thread
        self.stopped = threading.Event()
        self.lost_to: dict[str, Any] | None = None  # once taken over, for good (the loop steps down)
        # only where another node could take over: an SSH cluster whose client said which node this is
        self.held = bool(self.path and self.node and cfg.get("ssh_command"))

    def record(self, **extra: Any) -> dict[str, Any]:
        return {
            "node": self.node,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": self.started,
            "token": self.token,
            "epoch": self.epoch,
            "beat": now(),
            **extra,
        }

    def take(self) -> None:
        """Claim the lease's next epoch and say on the share that this scheduler holds the cluster now."""
        if not self.held or self.path is None or self.cluster_dir is None or self.node is None:
            return
        try:
            for _ in range(20):  # another claims at the same moment: the next epoch after theirs
                epoch = newest_claim(self.cluster_dir) + 1
                if claim(self.cluster_dir, epoch, self.node):
                    self.epoch = epoch
                    break
            write_json_atomic(self.path, self.record())
        except OSError as exc:  # the share refuses writes: clients keep the first node that answers
            log(f"could not record this node as the cluster's head: {exc}")
            return
        self.beaten = time.monotonic()
        log(f"holds the cluster's head lease on node {self.node} (epoch {self.epoch})")

    def beat(self) -> None:
        """Rewrite the lease with a fresh ``beat`` every ``BEAT_S``, unless another took it over since."""
        with self.lock:
            if not self.held or self.path is None or time.monotonic() - self.beaten < BEAT_S:
                return
            if self.stopped.is_set():
                return
            self.beaten = time.monotonic()
            self.checked = 0.0  # looked at right before the write: never beat over a newer head's lease
            if self.taken_over() is not None:
                return
            try:
                write_json_atomic(self.path, self.record(), sync=False)
            except OSError as exc:
                log(f"could not beat the cluster's head lease: {exc}")

    def beat_in_background(self, ticked: Callable[[], float], stall_s: float = LOOP_STALL_S) -> None:
        """Beat from a thread of its own while the scheduler's loop came round (``ticked``: when it last
        did) within ``stall_s``: a pass that waits on a node must not read as a lost head node to
        the standbys, a loop stuck for good must."""
        if not self.held:
            return

        def run() -> None:
            while not self.stopped.wait(BEAT_S / 4):
                if time.monotonic() - ticked() < stall_s:
                    self.beat()

        threading.Thread(target=run, name="head-lease", daemon=True).start()

    def stop(self) -> None:
        """No beat from now on (this scheduler steps down or exits)."""
        with self.lock:
            self.stopped.set()

    def release(self) -> None:
        """Say the lease is let go (an idle scheduler exits): the standbys have nothing to take over."""
        self.stop()
        with self.lock:
            if not self.held or self.path is None:
                return
            self.checked = 0.0
            if self.taken_over() is not None:
                return
            with contextlib.suppress(OSError):
                write_json_atomic(self.path, self.record(released=True))

    def taken_over(self) -> dict[str, Any] | None:
        """The lease's record when another scheduler took it since (checked every ``CHECK_S``): a newer
        claim than this one's, or (a scheduler of an older version, which claims none) another token."""
        with self.lock:
            if self.lost_to is not None:
                return self.lost_to
            if not self.held or self.path is None or time.monotonic() - self.checked < CHECK_S:
                return None
            self.checked = time.monotonic()
            self.lost_to = self._newer_record()
            return self.lost_to

    def _newer_record(self) -> dict[str, Any] | None:
        """The lease's record where a newer claim (or another token) than this scheduler's holds it."""
        record = load_or_none(self.path) if self.path else None
        if self.cluster_dir is not None and self.epoch and newest_claim(self.cluster_dir) > self.epoch:
            return record if isinstance(record, dict) else {"node": "another node"}
        if (
            isinstance(record, dict)
            and epoch_of(record) is None
            and record.get("token") not in (None, self.token)
        ):
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
