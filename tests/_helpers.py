"""The test helpers by theme (tests/ is on pythonpath): ``_procs`` (waiting, processes as /proc shows them),
``_scheduler_procs`` (the cluster scheduler's processes), ``_stand_ins`` (the tutorial's tools and a container
engine), ``_links`` (a job planting links), ``_configs`` (a cluster configuration, recipe mountVolumes).

Only re-exported here for code written against the old single module; import from the themed module."""

from __future__ import annotations

from _configs import local_cluster_config, recipe_mount_volumes
from _links import PLANT_LINKS, check_links_not_followed
from _procs import pid_alive, read_pid, started_at, still_running, wait_for
from _scheduler_procs import cmdline, execed, kill_scheduler_at_launch, ppid, scheduler_pid
from _stand_ins import ENGINE_SCRIPT, TUTORIAL_SCRIPT, engine_calls, stand_in_engine, stand_in_tools

__all__ = [
    "ENGINE_SCRIPT",
    "PLANT_LINKS",
    "TUTORIAL_SCRIPT",
    "check_links_not_followed",
    "cmdline",
    "engine_calls",
    "execed",
    "kill_scheduler_at_launch",
    "local_cluster_config",
    "pid_alive",
    "ppid",
    "read_pid",
    "recipe_mount_volumes",
    "scheduler_pid",
    "stand_in_engine",
    "stand_in_tools",
    "started_at",
    "still_running",
    "wait_for",
]
