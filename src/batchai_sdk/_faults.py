"""Fault drills: a fault put into a running job on purpose (``job.inject_fault``), to see what it costs.

Refused unless the job's cluster was created with ``allow_fault_injection=True``. The request goes to the
job's run folder on the share as ``fault-<node>.json`` with the attempt's tag; the node's watcher (a rank
shim of the job there) does it within a second (node/job/faults.py). ``evict`` is the simulated eviction
(``cluster.simulate_eviction``). Each fault is recorded in ``faults.jsonl`` in the run folder (kind, node,
rank, step, time, attempt): ``job.goodput`` dates each fault's detection from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._models import ClusterSpec, JobState, utcnow
from .exceptions import BatchAIError, BatchAITimeoutError, FaultInjectionRefusedError, ValidationError
from .node.protocol.paths import fault_request
from .share import join

if TYPE_CHECKING:
    from .job import Job

KINDS = ("kill_rank", "hang_rank", "stop_node", "lose_node", "evict")
RANK_KINDS = ("kill_rank", "hang_rank")
FAULTS_RECORD = "faults.jsonl"
REFUSE_SECONDS = 30.0  # lose_node on SSH nodes: how long the node refuses the cluster's SSH commands


def read_faults(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _max_step(records: Iterable[tuple[int, float]], since: float) -> int | None:
    steps = [s for s, t in records if t >= since - 1.0]
    return max(steps) if steps else None


def _addresses(job: Job, spec: ClusterSpec) -> dict[str, str]:
    """Node id → address of the cluster's nodes where they are SSH hosts (else none)."""
    backend = job.workspace.backend
    if backend.kind != "ssh":
        return {}
    return {n.id: n.address for n in backend.cluster_status(spec).nodes}


def inject_fault(
    job: Job,
    kind: str,
    *,
    node: str | None = None,
    rank: int | None = None,
    at_step: int | None = None,
    grace_seconds: float = 30.0,
    timeout: float | None = 600.0,
    poll_interval: float = 0.2,
) -> dict[str, Any]:
    """See ``Job.inject_fault``."""
    cluster = job.workspace.get_cluster(job.spec.cluster)
    if not cluster.spec.allow_fault_injection:
        raise FaultInjectionRefusedError(cluster.name)
    if kind not in KINDS:
        raise ValidationError("kind", kind, f"one of {', '.join(KINDS)}")
    if kind in RANK_KINDS:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValidationError("rank", rank, f"the global rank (an int from 0) that {kind} hits")
    elif rank is not None:
        raise ValidationError("rank", rank, f"None: {kind} hits a node (node=...), not a rank")
    if at_step is not None and (isinstance(at_step, bool) or not isinstance(at_step, int) or at_step < 0):
        raise ValidationError(
            "at_step", at_step, "a step number (an int from 0) the job logs with log_metric"
        )
    deadline = None if timeout is None else time.monotonic() + timeout

    def waited(what: str) -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise BatchAITimeoutError(f"{what} of job {job.name!r}", timeout or 0.0)
        if job.state.ended:
            raise ValidationError("job", job.name, f"a running job (it is {job.state.value})")
        time.sleep(poll_interval)

    while True:  # running, with its ranks started (the record names the attempt's tag)
        record = job.workspace.share.read_json_or_none(job.paths.status) or {}
        if (
            record.get("state") == JobState.RUNNING.value
            and record.get("tag")
            and not record.get("preparing")
        ):
            break
        waited("the job to run")
    if at_step is not None:
        started = job.status.start_time
        since = started.timestamp() if started else 0.0
        while (_max_step(job._step_records(), since) or -1) < at_step:
            waited(f"step {at_step}")
        record = job.workspace.share.read_json_or_none(job.paths.status) or {}
    nodes = list(record.get("nodes") or [])
    if node is not None and node not in nodes:
        raise ValidationError("node", node, f"a node of the job's attempt ({', '.join(nodes) or 'none'})")
    targets = [node] if node is not None else (nodes if kind in RANK_KINDS else nodes[-1:])
    when = utcnow().isoformat()
    fault = {
        "kind": kind,
        "node": node if node is not None else (None if kind in RANK_KINDS else targets[0]),
        "rank": rank,
        "at_step": at_step,
        "time": when,
        "attempt": int(record.get("attempt") or 0),
    }
    share = job.workspace.share
    if kind == "evict":
        cluster.simulate_eviction(targets[0], grace_seconds=grace_seconds)
    else:
        addresses = _addresses(job, cluster.spec) if kind == "lose_node" else {}
        for target in targets:  # a rank's node is found there: each node's watcher looks for it
            request: dict[str, Any] = {"kind": kind, "rank": rank, "tag": record["tag"], "time": when}
            if target in addresses:  # an SSH node: it refuses the cluster's SSH commands for a while
                request.update(address=addresses[target], refuse_seconds=REFUSE_SECONDS)
            share.write_json(join(job.paths.run_dir, fault_request(target)), request)
    try:
        text = share.read_text(join(job.paths.run_dir, FAULTS_RECORD))
    except BatchAIError:
        text = ""
    share.write_text(join(job.paths.run_dir, FAULTS_RECORD), text + json.dumps(fault) + "\n")
    return fault
