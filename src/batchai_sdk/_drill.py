"""``batchai job drill``: a submitted job run through N faults drawn at random, each about ``every_steps``
steps after the job last (re)started logging steps, with each recovery timed from the fault to the first
step the next attempt logged; then the job's goodput."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._models import parse_time
from .exceptions import BatchAIError

if TYPE_CHECKING:
    from .job import Job

RANK_KINDS = ("kill_rank", "hang_rank")


def _steps_since(job: Job, since: float) -> list[tuple[int, float]]:
    return sorted((r for r in job._step_records() if r[1] >= since), key=lambda r: r[1])


def run_drill(
    job: Job,
    kinds: list[str],
    faults: int,
    *,
    every_steps: int = 10,
    seed: int | None = None,
    timeout: float = 1800.0,
    say: Callable[[str], object] = print,
) -> dict[str, Any]:
    """Inject ``faults`` faults into ``job``; returns the recoveries and the goodput (``to_dict``)."""
    rng = random.Random(seed)
    recoveries: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    for n in range(faults):
        kind = rng.choice(kinds)
        since = recoveries[-1]["resumed_at"] if recoveries and recoveries[-1]["resumed_at"] else 0.0
        steps = _steps_since(job, since)
        base = steps[0][0] if steps else 0
        at_step = base + rng.randint(max(1, every_steps // 2), every_steps * 3 // 2)
        rank = rng.randrange(job.spec.node_count) if kind in RANK_KINDS else None
        try:
            fault = job.inject_fault(
                kind, rank=rank, at_step=at_step, timeout=max(1.0, deadline - time.monotonic())
            )
        except BatchAIError as exc:
            say(f"fault {n + 1}: not injected: {exc}")
            break
        when = parse_time(fault["time"])
        fault_s = when.timestamp() if when else time.time()
        attempts_before = len(job.attempts)
        say(f"fault {n + 1}/{faults}: {kind} at step {at_step} ({fault['node'] or f'rank {rank}'})")
        resumed = None
        while time.monotonic() < deadline and not job.state.ended:  # the next attempt's first step
            started = job.status.start_time  # the attempt running now
            if len(job.attempts) > attempts_before and started is not None:
                later = _steps_since(job, max(fault_s, started.timestamp()))
                if later:
                    resumed = later[0]
                    break
            time.sleep(0.5)
        recovery = {
            "kind": kind,
            "node": fault["node"],
            "rank": rank,
            "at_step": at_step,
            "fault_time": fault["time"],
            "resumed_at": resumed[1] if resumed else None,
            "resumed_step": resumed[0] if resumed else None,
            "recovery_s": round(resumed[1] - fault_s, 1) if resumed else None,
        }
        recoveries.append(recovery)
        if resumed is None:
            say(f"  not resumed: the job is {job.state.value}")
            break
        say(f"  resumed at step {resumed[0]}, {recovery['recovery_s']} s after the fault")
    job.wait(timeout=max(1.0, deadline - time.monotonic()))
    goodput = job.goodput
    say(goodput.summary())
    for loss in goodput.lost:
        say(
            f"  attempt {loss.attempt} ({loss.cause}): detection {loss.detection_s or 0:.1f} s,"
            f" restart {loss.restart_s or 0:.1f} s,\n"
            f"    {loss.steps_repeated} step(s) recomputed ({loss.recomputed_s:.1f} s)"
        )
    return {"faults": recoveries, "goodput": goodput.to_dict(), "state": job.state.value}
