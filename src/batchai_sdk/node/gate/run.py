"""The gate across a cluster's nodes, run from the head node: each node's own checks, an all-reduce on
each node, then between pairs of nodes (level ``full``), and the versions compared.

Standard library only. A node is reached the way the scheduler reaches it (``ssh_command`` + address, or
a local process where there is no SSH); one that does not answer fails ``reachable``. Every step is
bounded in time, so a gate over a dead node ends. The report is plain JSON: the checks with their lines,
and ``unusable``: node -> why.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from .checks import Check, bandwidth_checks, unusable, versions_agree

NODE_TIMEOUT = 60.0
ALLREDUCE_TIMEOUT = 90.0


class Nodes:
    """How the head node runs a command on a node: ``ssh_command`` + address, or locally."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.ssh = cfg.get("ssh_command")
        self.python = str(cfg["python"])
        self.node_main = str(cfg["node_main"])

    def argv(self, address: str, args: Sequence[str], *, site: bool = False) -> list[str]:
        local = [self.python, *([] if site else ["-S"]), self.node_main, "gate", *args]
        if self.ssh is None:
            return local
        return [*self.ssh, "-o", "ConnectTimeout=10", address, shlex.join(local)]

    def run(
        self, address: str, args: Sequence[str], timeout: float, *, site: bool = False
    ) -> tuple[int, str]:
        argv = self.argv(address, args, site=site)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return -1, f"no answer in {timeout:g} s"
        except OSError as exc:
            return -1, str(exc)
        return done.returncode, done.stdout if done.returncode == 0 else (done.stderr or done.stdout)


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _port() -> int:
    return random.randint(29400, 29999)  # below the kernel's ephemeral range, like the jobs' ports


def allreduce(
    runner: Nodes, ranks: Sequence[tuple[str, str]], megabytes: float, iters: int
) -> tuple[float | None, str]:
    """All-reduce across ``ranks`` ((node id, address) each; the first is the master): (GB/s, note).
    None when it failed; the note says why, or that torch is missing (then the value is 0.0, skipped)."""
    master, port = ranks[0][1], _port()
    with concurrent.futures.ThreadPoolExecutor(len(ranks)) as pool:
        args = [str(len(ranks)), master, str(port), str(megabytes), str(iters)]
        futs = [
            pool.submit(runner.run, address, ["allreduce", str(r), *args], ALLREDUCE_TIMEOUT, site=True)
            for r, (_, address) in enumerate(ranks)
        ]
        results = [f.result() for f in futs]
    code, out = results[0]
    doc = _last_json(out) if code == 0 else None
    if doc is not None and "skipped" in doc:
        return 0.0, str(doc["skipped"])
    if doc is None or "busbw" not in doc:
        failed = [(ranks[i][0], o) for i, (c, o) in enumerate(results) if c != 0]
        node, text = failed[0] if failed else (ranks[0][0], out)
        return None, f"{node}: {text.strip().splitlines()[-1][:200] if text.strip() else 'no output'}"
    return float(doc["busbw"]), str(doc.get("backend", ""))


def run_gate(cfg: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]], level: str) -> dict[str, Any]:
    """The gate over ``nodes`` (``{"id", "address", "slots"}`` each) at ``level`` (basic or full).

    ``cfg["health"]`` holds what the client knows of the VM size: ``gpus`` per node, ``node_busbw`` and
    ``link_busbw`` floors (GB/s, absent where unknown) and the sniff test's ``tolerance``."""
    started = time.time()
    health = dict(cfg.get("health") or {})
    gpus = int(health.get("gpus") or 0)
    runner = Nodes(cfg)
    checks: list[Check] = []
    notes: list[str] = []
    versions: dict[str, dict[str, str | None]] = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, len(nodes))) as pool:
        reports = {
            n["id"]: pool.submit(runner.run, n["address"], ["node", n["id"], level, str(gpus)], NODE_TIMEOUT)
            for n in nodes
        }
        up = []
        for n in nodes:
            code, out = reports[n["id"]].result()
            doc = _last_json(out) if code == 0 else None
            if doc is None:
                why = out.strip().splitlines()[-1][:200] if out.strip() else f"exit {code}"
                checks.append(Check(n["id"], "reachable", False, f"{n['address']}: {why}"))
                continue
            up.append(n)
            checks.extend(Check.from_dict(c) for c in doc.get("checks", []))
            versions[n["id"]] = dict(doc.get("versions") or {})
            notes.extend(f"{n['id']}: {note}" for note in doc.get("notes") or [])
    checks.extend(versions_agree(versions))
    per_node = 2 if gpus == 0 else gpus  # gloo on CPU: two ranks; NCCL: one rank per GPU (none with one GPU)
    # a rendezvous for "basic"; for "full", enough bytes for the link to reach its speed (nccl-tests
    # reaches NVLink's plateau from a few hundred MB; gloo on CPU from tens)
    mb, iters = (1.0, 2) if level == "basic" else ((256.0, 10) if gpus else (32.0, 5))
    measured: dict[str, float | None] = {}
    for n in up if per_node > 1 else ():  # one after another: two at once on a link measure each other
        value, note = allreduce(runner, [(n["id"], n["address"])] * per_node, mb, iters)
        if value == 0.0 and note:
            notes.append(f"{n['id']}: all-reduce skipped ({note})")
            continue
        measured[n["id"]] = value
        if value is None:
            notes.append(f"{n['id']}: {note}")
    # Megatron's 10% for GPUs; CPU nodes measured with gloo are noisier: only 3x slower is a sick node
    tolerance = float(health.get("tolerance") or (0.1 if gpus else 0.7))
    if level == "full":  # a node that looks slow is measured once more before it is judged
        for c in bandwidth_checks("allreduce", measured, health.get("node_busbw"), tolerance):
            n = next(x for x in up if x["id"] == c.node)
            if not c.ok and measured[c.node] is not None:
                again, _ = allreduce(runner, [(n["id"], n["address"])] * per_node, mb, iters)
                measured[c.node] = max(measured[c.node] or 0.0, again or 0.0)
    # a rendezvous that completes is basic's check; "full" keeps that row and adds bandwidth
    for k, v in sorted(measured.items()):
        checks.append(Check(k, "rendezvous", v is not None, "completed" if v is not None else "failed"))
    if level == "full":
        checks.extend(bandwidth_checks("allreduce", measured, health.get("node_busbw"), tolerance))
        links: dict[str, float | None] = {}
        pairs = list(combinations(up, 2)) if len(up) <= 4 else list(zip(up, up[1:] + up[:1], strict=False))
        for a, b in pairs:
            value, note = allreduce(runner, [(a["id"], a["address"]), (b["id"], b["address"])], mb, iters)
            if value == 0.0 and note:
                continue
            links[f"{a['id']}<->{b['id']}"] = value
        checks.extend(bandwidth_checks("link-allreduce", links, health.get("link_busbw"), tolerance))
    return {
        "level": level,
        "nodes": [n["id"] for n in nodes],
        "started": started,
        "seconds": round(time.time() - started, 2),
        "checks": [c.to_dict() for c in checks],
        "notes": notes,
        "unusable": unusable(checks),
    }
