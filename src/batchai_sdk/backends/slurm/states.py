"""Slurm's job and node states mapped to ours — the only place this is spelled.

Job states are Slurm's ``squeue %T`` / ``sacct State`` words (``CANCELLED by 0`` included); node states
are ``sinfo %T`` words with their flag suffixes (``idle~``, ``down*``, ...).
"""

from __future__ import annotations

from ..._models import JobState, NodeState
from ...node.protocol.records import (
    CLUSTER_AT_ZERO,
    DEPENDENCY,
    HELD,
    NODES_DOWN,
    OTHER,
    PREPARING_NODES,
    PRIORITY,
    QUOTA,
    SUBMITTED,
    WAITING_FOR_NODES,
    PendingDoc,
)

__all__ = ["job_state", "node_state", "pending_reason"]

_RUNNING = {
    "RUNNING",
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "SUSPENDED",
    "STOPPED",
}
_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_FAILED = {
    "FAILED": "the job's batch script exited with a non-zero code",
    "NODE_FAIL": "a node of the job failed (Slurm NODE_FAIL)",
    "OUT_OF_MEMORY": "out of memory: Slurm killed the job (OUT_OF_MEMORY)",
    "BOOT_FAIL": "a node of the job failed to boot (Slurm BOOT_FAIL)",
    "DEADLINE": "the job's deadline passed before it could run (Slurm DEADLINE)",
    "SPECIAL_EXIT": "the job ended with Slurm's special exit state (SPECIAL_EXIT)",
}


def job_state(
    raw: str, *, exit_code: str | None = None, requeue: bool = False, time_limit: str | None = None
) -> tuple[JobState, str | None]:
    """Our state and failure reason for a Slurm job state.

    ``exit_code`` is Slurm's ``code:signal`` (sacct ExitCode), ``requeue`` whether a preempted job goes back
    to the queue (``--requeue`` or the partition's PreemptMode=REQUEUE), ``time_limit`` the limit shown
    in a TIMEOUT reason.
    """
    word = raw.strip().split()[0].upper().rstrip("+") if raw.strip() else ""
    if word in _QUEUED:
        return JobState.QUEUED, None
    if word in _RUNNING:
        return JobState.RUNNING, None
    if word == "COMPLETED":
        return JobState.SUCCEEDED, None
    if word == "CANCELLED":
        by = raw.strip()[len("CANCELLED") :].strip()
        return JobState.TERMINATED, "cancelled in Slurm" + (f" ({by})" if by else "")
    if word == "REVOKED":
        return JobState.TERMINATED, "revoked by Slurm (federation: the job runs on another cluster)"
    if word == "TIMEOUT":
        limit = f" of {time_limit}" if time_limit else ""
        return JobState.FAILED, f"wall clock limit{limit} exceeded: Slurm ended the job (TIMEOUT)"
    if word == "PREEMPTED":
        if requeue:
            return JobState.QUEUED, None
        return JobState.FAILED, "preempted by a higher-priority job and not requeued (Slurm PREEMPTED)"
    if word in _FAILED:
        reason = _FAILED[word]
        if word == "FAILED" and exit_code:
            code, _, sig = exit_code.partition(":")
            reason = f"{reason} ({code}" + (f", signal {sig}" if sig and sig != "0" else "") + ")"
        return JobState.FAILED, reason
    return JobState.FAILED, f"unrecognised Slurm job state {raw.strip()!r}"


# sinfo's state flags: * not responding, ~ powered off, # powering up, ! pending power down,
# % powering down, $ maintenance, @ pending reboot, ^ rebooting, - planned by backfill.
_NODE_FLAGS = "*~#!%$@^-"


def node_state(raw: str) -> tuple[NodeState, str | None]:
    """Our node state (and why a node is unusable) for a ``sinfo %T`` word such as ``mixed`` or ``down*``."""
    text = raw.strip().lower()
    word = text.rstrip(_NODE_FLAGS)
    flags = text[len(word) :]
    if "*" in flags:
        return NodeState.UNUSABLE, f"not responding to slurmctld ({text})"
    if word in ("down", "drained", "draining", "fail", "failing", "inval", "not_responding"):
        return NodeState.UNUSABLE, f"Slurm node state {text}"
    if (
        "#" in flags
        or "@" in flags
        or "^" in flags
        or word in ("configuring", "reboot", "powering_up", "unknown")
    ):
        return NodeState.PREPARING, None
    if "%" in flags or "!" in flags or word in ("completing", "powering_down"):
        return NodeState.LEAVING, None
    if word in ("allocated", "mixed", "alloc", "mix"):
        return NodeState.RUNNING, None
    if word in ("idle", "reserved", "resv", "planned", "future", "powered_down", "power_down", "maint"):
        # ``idle~`` (powered off, cloud/autoscale): Slurm starts it when a job needs it.
        return NodeState.IDLE, None
    return NodeState.UNUSABLE, f"unrecognised Slurm node state {text!r}"


# squeue's Reason for a pending job (%r) -> why it waits (node/protocol/records.py's kinds); first match wins
_PENDING = (
    (("None",), SUBMITTED, "Slurm has not considered it yet"),
    (("Resources",), WAITING_FOR_NODES, "the nodes it needs are busy"),
    (("Priority",), PRIORITY, "jobs of higher priority go first"),
    (("JobHeld", "launch failed requeued held"), HELD, "held: `scontrol release` lets it go"),
    (("Dependency", "BeginTime"), DEPENDENCY, "it waits for another job or its begin time"),
    (("PartitionDown", "PartitionInactive"), CLUSTER_AT_ZERO, "the partition takes no jobs now"),
    (("ReqNodeNotAvail", "NodeDown", "Nodes_required"), NODES_DOWN, "nodes it needs are down or drained"),
    (("QOS", "Assoc", "Licenses", "PartitionNodeLimit", "PartitionTimeLimit"), QUOTA, "a limit holds it"),
    (("Prolog", "Configuring", "PowerUp", "NodeBoot"), PREPARING_NODES, "its nodes are being prepared"),
)


def pending_reason(reason: str) -> PendingDoc:
    """Why a pending Slurm job waits, from squeue's Reason (``Resources``, ``ReqNodeNotAvail, ...``)."""
    word = reason.strip().strip("()") or "None"
    for prefixes, kind, why in _PENDING:
        if word.startswith(prefixes):
            return PendingDoc(kind=kind, message=f"{why} (Slurm: {word})", source=word)
    return PendingDoc(kind=OTHER, message=f"Slurm says {word}", source=word)
