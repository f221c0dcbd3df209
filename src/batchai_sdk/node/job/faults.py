"""Fault drills on a node (``job.inject_fault``): the client leaves ``fault-<node>.json`` in the job's run
folder with the attempt's tag; the node's watcher (the rank shim that watches for evictions, rank.py) finds it
within a second, removes it and does it here to the job's processes on this node:

``kill_rank``  SIGKILL to the processes of rank R (what a crashed rank looks like);
``hang_rank``  SIGSTOP to them (a rank stuck in a collective: no output, no exit);
``stop_node``  SIGSTOP to every rank of the job on this node and their shims, this watcher's included;
``lose_node``  ``lost-<node>.json`` in the run folder (the scheduler ends the attempt as this node's loss
               and keeps the node out until it answers again), then SIGKILL to every rank and shim here;
               on SSH nodes (the request names the node's ``address``) the node also refuses the cluster's
               SSH commands for ``refuse_seconds`` (node/refusal.py) and its warm agent is ended, so it
               is as silent as a lost node until then.

A request of another attempt (its tag) is left alone: it is stale. The job's launcher, mpirun and MPI's
daemons carry no rank and are never signalled here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable
from typing import Any

from .. import refusal
from ..common import write_json_atomic
from ..protocol.paths import fault_request, lost_marker
from . import procs

KINDS = ("kill_rank", "hang_rank", "stop_node", "lose_node")
RANK_VARIABLES = (b"OMPI_COMM_WORLD_RANK", b"PMI_RANK", b"RANK")


def rank_of(pid: int) -> int | None:
    """The global rank in process ``pid``'s environment (Open MPI's, PMI's or torch's), if any."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return None
    found = dict(e.split(b"=", 1) for e in entries if b"=" in e)
    for name in RANK_VARIABLES:
        value = found.get(name, b"").strip()
        if value.isdigit():
            return int(value)
    return None


def ranks_here(tag: str, node: str, rank_nodes: list[str]) -> dict[int, int]:
    """pid → rank of the job's processes that carry a rank of this node (shims included)."""
    out = {}
    for pid in procs.tagged_pids(tag):
        rank = rank_of(pid)
        if rank is not None and rank < len(rank_nodes) and rank_nodes[rank] == node:
            out[pid] = rank
    return out


def pending(run_dir: str, node: str, tag: str) -> dict[str, Any] | None:
    """This attempt's fault request for the node, taken (removed); None when there is none."""
    path = os.path.join(run_dir, fault_request(node))
    try:
        with open(path, encoding="utf-8") as f:
            request = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(request, dict) or request.get("tag") != tag or request.get("kind") not in KINDS:
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return request


def agents_of(address: str) -> list[int]:
    """The node agents (``agent NAME``, node/agent/) whose SSH session came in on ``address``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[3:4] != [b"agent"] or not argv[2].endswith(b"__main__.py"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                pairs = (e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
                environ = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}
        except OSError:
            continue
        if refusal.server_address(environ) == address:
            found.append(int(entry))
    return found


def _signal(pids: list[int], sig: int) -> int:
    done = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            done += 1
        except (ProcessLookupError, PermissionError):
            pass
    return done


def apply(
    request: dict[str, Any],
    run_dir: str,
    tag: str,
    node: str,
    rank_nodes: list[str],
    say: Callable[[str], object],
) -> None:
    """Do the drill's fault here, saying what it does (``say``: the node's execution log) first;
    ``stop_node`` and ``lose_node`` end (or stop) the calling process last."""
    kind = request["kind"]
    here = ranks_here(tag, node, rank_nodes)
    me = os.getpid()
    ours = [pid for pid in here if pid != me]
    if kind in ("kill_rank", "hang_rank"):
        rank = request.get("rank")
        victims = [pid for pid in procs.rank_pids(tag) if here.get(pid) == rank]
        sig = signal.SIGKILL if kind == "kill_rank" else signal.SIGSTOP
        say(f"fault drill {kind}: {signal.Signals(sig).name} to {len(victims)} process(es) of rank {rank}")
        _signal(victims, sig)
        return
    if kind == "lose_node":
        say(f"fault drill lose_node: SIGKILL to {len(here)} process(es) of the job's ranks here")
        with contextlib.suppress(OSError):
            write_json_atomic(os.path.join(run_dir, lost_marker(node)), {"node": node, "tag": tag, **request})
        address, seconds = request.get("address"), request.get("refuse_seconds")
        if isinstance(address, str) and isinstance(seconds, int | float) and seconds > 0:
            say(f"fault drill lose_node: {address} refuses the cluster's SSH commands for {seconds:g} s")
            with contextlib.suppress(OSError):
                refusal.refuse(address, float(seconds))
            _signal(agents_of(address), signal.SIGKILL)
        _signal(ours, signal.SIGKILL)
        if me in here:
            os.kill(me, signal.SIGKILL)
        return
    say(f"fault drill stop_node: SIGSTOP to {len(here)} process(es) of the job's ranks here")
    _signal(ours, signal.SIGSTOP)
    if me in here:
        os.kill(me, signal.SIGSTOP)
