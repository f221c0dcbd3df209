"""The scheduler's recovery: a new database on a replaced head node is rebuilt from the share's records,
and a restarted scheduler takes back the launchers and cleanups the previous one left."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from ..common import load_or_none, now
from . import attempt_end
from .store import NAME

if TYPE_CHECKING:
    from .daemon import Scheduler


def rebuild_from_share(sched: Scheduler) -> int:
    """A new database on a node that ran jobs before (the head node was replaced): rebuild the queue
    from the share's records. Queued jobs without secrets wait again; jobs that were running are
    reported failed (their processes are ended once their tags are found) rather than forgotten."""
    root = os.path.join(sched.cfg.get("meta_root", ""), "experiments")
    count = 0
    try:
        experiments = sorted(os.listdir(root))
    except OSError:
        return 0
    for exp in experiments:
        try:
            jobs = sorted(os.listdir(os.path.join(root, exp, "jobs")))
        except OSError:
            continue
        for name in jobs:
            if not (NAME.match(exp) and NAME.match(name)):
                continue
            base = os.path.join(root, exp, "jobs", name)
            status = load_or_none(os.path.join(base, "status.json")) or {}
            record = load_or_none(os.path.join(base, "job.json")) or {}
            spec = record.get("spec") or {}
            if spec.get("cluster") != sched.cfg.get("cluster") or status.get("state") not in (
                "queued",
                "running",
            ):
                continue
            count += 1
            created = status.get("creation_time")
            if status["state"] == "queued" and not spec.get("secret_environment"):
                sched.db.execute(
                    "INSERT INTO jobs (key, experiment, name, node_count, wall, state, creation_time)"
                    " VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                    (
                        f"{exp}/{name}",
                        exp,
                        name,
                        int(spec.get("node_count", 1)),
                        spec.get("max_wall_clock_seconds"),
                        created,
                    ),
                )
                continue
            why = (
                "lost with the cluster's head node while it ran"
                if status["state"] == "running"
                else "lost with the cluster's head node (its secrets were kept only there): submit again"
            )
            sched.db.execute(
                "INSERT INTO jobs (key, experiment, name, node_count, state, creation_time, start_time,"
                " end_time, nodes, reason) VALUES (?, ?, ?, ?, 'failed', ?, ?, ?, ?, ?)",
                (
                    f"{exp}/{name}",
                    exp,
                    name,
                    int(spec.get("node_count", 1)),
                    created,
                    status.get("start_time"),
                    now(),
                    json.dumps(status.get("nodes", [])),
                    why,
                ),
            )
    return count


def adopt(sched: Scheduler) -> None:
    """After a restart on the same node: launchers that outlived the old scheduler are watched again;
    jobs whose launcher is gone are cleaned up and ended from what the launcher left."""
    for row in sched.rows("state = 'cleaning'"):
        sched.cleaning[row["id"]] = sched.pool_exec.submit(
            attempt_end.clean_nodes, sched, row["tag"], json.loads(row["nodes"])
        )
    for row in sched.rows("state = 'running'"):
        if not sched.alive(row["launcher_pid"], row["tag"]):
            attempt_end.launcher_ended(sched, row["id"], None)
