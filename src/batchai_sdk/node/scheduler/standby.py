"""The head node's standbys: on an SSH cluster the scheduler starts one on each of its other nodes
(``Standbys``, over its SSH connection; ``standby STATE_DIR`` with the cluster's configuration on stdin), and
each watches the head lease (``head.json`` on the share, head.py) with no client anywhere. When the lease's
beat has not changed for ``STALE_S`` (the head node powered off, its scheduler killed or stalled), the first
node after the head in the cluster's order takes it over: it claims the lease's next epoch (exclusively:
of two standbys at once exactly one wins) and starts the scheduler on its own node, as a client's revive would
(``backends/head_scheduler.py``): every node in the configuration, the old head marked down, so its jobs are
fenced until it answers and it is taken back once it does (its own scheduler, should it run on, finds the
newer claim and steps down). The next nodes wait ``STAGGER_S`` more each, so a successor that is lost too,
or that lost its node setup with a reboot (``can_lead``), is skipped. A standby leaves once the lease is
released (the scheduler exited idle), is held by its own node, or is gone; one per node (``standby.lock``),
reading the newest configuration its scheduler handed it.

The configuration (the cluster's env included) is kept in the node-local state folder (0700), never on the
share or a command line."""

from __future__ import annotations

import concurrent.futures
import fcntl
import itertools
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from typing import Any

from ..common import load_or_none, try_append, write_json_atomic, write_text_atomic
from ..protocol.cluster import ClusterConfig, check_cluster
from ..protocol.fields import RequestError
from ..protocol.paths import HEAD_RECORD
from . import ctl, head
from .log import log

STALE_S = 8.0  # the lease's beat (head.BEAT_S) unchanged this long: its head is taken for lost
STAGGER_S = 4.0  # each next node in the cluster's order waits this much longer
POLL_S = 0.5
GONE_S = 60.0  # no lease this long: nothing to stand by for
RESTART_S = 60.0  # how often the scheduler starts again a node's standby (a no-op where one runs)
CONFIG = "standby.json"
# what a head needs of a node's setup to reach the others: the files beside the ssh command's -F file
# (backends/ssh/node_setup.py NodePaths), handed to a node that lost them with a reboot
SSH_SETUP_FILES = ("ssh_config", "id_ed25519", "known_hosts")


def order(cfg: ClusterConfig) -> list[str]:
    """The cluster's nodes in their order: the successors of a head are the ones after it, wrapping."""
    return [n["id"] for n in (cfg.get("pool") or cfg.get("nodes") or [])]


def wait_for(cfg: ClusterConfig, me: str, holder: str | None) -> float:
    """How long the lease must stand still before ``me`` takes it over from ``holder``."""
    ids = order(cfg)
    if me not in ids:
        return float("inf")
    here = ids.index(me)
    place = (here - ids.index(holder)) % len(ids) if holder in ids else here + 1
    return STALE_S + max(place - 1, 0) * STAGGER_S


def ssh_config_path(cfg: ClusterConfig) -> str | None:
    """The ``-F`` file of the cluster's ssh command: the node setup's SSH configuration."""
    ssh = list(cfg.get("ssh_command") or [])
    return next((value for flag, value in itertools.pairwise(ssh) if flag == "-F"), None)


def can_lead(cfg: ClusterConfig) -> bool:
    """Whether this node has what a head needs to reach the others: its node setup's SSH configuration (the
    ``-F`` file of the cluster's ssh command, with the key and known hosts beside it). A node that booted
    afresh lost it with its disk until its head hands it back (``ssh_setup``/``restore_ssh_setup``) or a
    client sets it up again; meanwhile it leaves the takeover to the next."""
    config = ssh_config_path(cfg)
    return config is None or all(
        os.path.isfile(os.path.join(os.path.dirname(config), name)) for name in SSH_SETUP_FILES
    )


def ssh_setup(cfg: ClusterConfig) -> dict[str, str]:
    """This (head) node's SSH setup files, to hand to a node that lost its own: {} where it has none."""
    config = ssh_config_path(cfg)
    if config is None or not can_lead(cfg):
        return {}
    folder = os.path.dirname(config)
    out = {}
    for name in SSH_SETUP_FILES:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            out[name] = f.read()
    return out


def restore_ssh_setup(cfg: ClusterConfig, files: object) -> bool:
    """Write the head's SSH setup files where this node has none (0600 in a 0700 folder, each whole or not
    at all); a node that has its own keeps it. True when they were restored."""
    config = ssh_config_path(cfg)
    if config is None or can_lead(cfg) or not isinstance(files, dict):
        return False
    if set(files) != set(SSH_SETUP_FILES) or not all(isinstance(v, str) for v in files.values()):
        raise RequestError("invalid", "setup: not the node setup's SSH files")
    folder = os.path.dirname(config)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    for name in SSH_SETUP_FILES:
        write_text_atomic(os.path.join(folder, name), files[name], mode=0o600)
    return True


def take_over(state_dir: str, cfg: ClusterConfig, me: str, seen: dict[str, Any]) -> bool:
    """Claim the lease's epoch after ``seen``'s and start the scheduler here: True when this node won."""
    cluster_dir = cfg["cluster_dir"]
    after = head.epoch_of(seen)
    epoch = (after if after is not None else head.newest_claim(cluster_dir)) + 1
    if not head.claim(cluster_dir, epoch, me):
        return False
    lost = seen.get("node")
    every = list(cfg.get("pool") or cfg.get("nodes") or [])
    taken = dict(cfg)
    taken.update(
        head=me, nodes=every, pool=every, down=[lost] if isinstance(lost, str) and lost != me else []
    )
    # a database this node kept is from before: the scheduler sets it aside as it starts, since the lease
    # still names the lost head (head.held_elsewhere), and rebuilds the queue from the share
    write_json_atomic(os.path.join(state_dir, "cluster.json"), taken, mode=0o600)
    ctl.start_scheduler(state_dir, cfg["node_main"])
    log(f"standby on node {me}: the head lease of node {lost} stood still; took it over (epoch {epoch})")
    return True


def watch(state_dir: str) -> int:
    """The standby's loop (one per node: ``standby.lock``)."""
    lock = open(os.path.join(state_dir, "standby.lock"), "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # one watches here already; it reads the configuration just handed over
    last: tuple[Any, Any] | None = None
    still_since = time.monotonic()
    while True:
        time.sleep(POLL_S)
        kept = load_or_none(os.path.join(state_dir, CONFIG))
        if not isinstance(kept, dict) or not isinstance(kept.get("node"), str):
            return 0
        cfg: ClusterConfig = kept["cluster"]
        me: str = kept["node"]
        record = load_or_none(os.path.join(cfg["cluster_dir"], HEAD_RECORD))
        if not isinstance(record, dict):
            if time.monotonic() - still_since > GONE_S:
                return 0
            continue
        if record.get("released") or record.get("node") == me:  # idle exit, or this node holds it
            return 0
        if record.get("host") == socket.gethostname():  # nodes of one machine (loopback): one state folder,
            return 0  # whose scheduler a client restarts there; a standby would only take its database away
        now = (record.get("token"), record.get("beat"))
        if now != last:
            last, still_since = now, time.monotonic()
            continue
        if time.monotonic() - still_since < wait_for(cfg, me, record.get("node")):
            continue
        if not can_lead(cfg):  # not set up (booted afresh): the next node in the order takes over
            continue
        if take_over(state_dir, cfg, me, record):
            return 0
        last, still_since = None, time.monotonic()  # another node won: watch its lease


def main(state_dir: str) -> int:
    """``standby STATE_DIR``: keep the configuration on stdin (``{"cluster": …, "node": …, "setup": …}``;
    ``setup``: the head's SSH setup files, written only where this node lost its own) and make sure
    a standby watches here (started detached; one that runs already reads the new configuration)."""
    try:
        request = json.loads(sys.stdin.buffer.read(1 << 20))
        cfg = check_cluster(request.get("cluster"))
        me = request.get("node")
        if not isinstance(me, str) or me not in order(cfg) or not cfg.get("cluster_dir"):
            raise RequestError("invalid", "node: not one of the cluster's nodes")
        restored = restore_ssh_setup(cfg, request.get("setup"))
    except (ValueError, AttributeError, RequestError, OSError) as exc:
        print(json.dumps({"ok": False, "message": str(exc)}))
        return 2
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    if restored:
        try_append(
            os.path.join(state_dir, "standby.log"),
            f"node {me} had lost its SSH setup (booted afresh): restored from its head, so it can take over",
        )
    write_json_atomic(os.path.join(state_dir, CONFIG), {"cluster": cfg, "node": me}, mode=0o600)
    with open(os.path.join(state_dir, "standby.log"), "ab") as out:
        subprocess.Popen(
            [sys.executable, "-S", cfg["node_main"], "standby-watch", state_dir],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            close_fds=True,
        )
    print(json.dumps({"ok": True}))
    return 0


class Standbys:
    """The scheduler's side: a standby on each other node of an SSH cluster without autoscale (where a
    client's revive does not take over either), started again every ``RESTART_S`` (a node that came back)."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.started: dict[str, float] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="standby")

    def tick(self, cfg: ClusterConfig, lease: head.HeadLease) -> None:
        ssh = cfg.get("ssh_command")
        if not lease.held or not ssh or cfg.get("autoscale") or not lease.epoch:
            return
        for node in cfg.get("pool") or cfg.get("nodes") or []:
            if (
                node["id"] == lease.node
                or time.monotonic() - self.started.get(node["id"], -RESTART_S) < RESTART_S
            ):
                continue
            self.started[node["id"]] = time.monotonic()
            self.pool.submit(self.start, list(ssh), cfg, node["id"], node["address"])

    def start(self, ssh: list[str], cfg: ClusterConfig, node: str, address: str) -> None:
        remote = shlex.join([cfg["python"], "-S", cfg["node_main"], "standby", self.state_dir])
        try:  # a node that booted afresh gets the SSH setup back, so it can take the cluster over
            setup = ssh_setup(cfg)
        except OSError:
            setup = {}
        payload = json.dumps({"cluster": cfg, "node": node, "setup": setup}).encode()
        try:
            done = subprocess.run(
                [*ssh, "-o", "ConnectTimeout=5", address, remote],
                input=payload,
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log(f"could not start the head's standby on node {node}: {exc}")
            return
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace")[-300:]
            log(f"could not start the head's standby on node {node}: {why}")

    def close(self) -> None:
        self.pool.shutdown(wait=False)
