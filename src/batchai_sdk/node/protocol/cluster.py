"""The cluster's configuration: what the client builds (``HeadNodeScheduler.cluster_config``), a request
carries where ``ctl`` must start the scheduler (or the nodes changed), ``scheduler/api.check_cluster``
checks, and the head node keeps as ``cluster.json``. ``TypedDict``s: the record travels as JSON, ``ctl``
does not load this module (``api.py`` imports it for type checking), and mypy checks every key read at both
ends."""

from __future__ import annotations

from typing import Any, TypedDict


class NodeConfig(TypedDict):
    """One node as the scheduler reaches it: its id, its address (an ``ssh`` argument: checked as a
    host), the machine it runs on (nodes of one machine share its processes) and its MPI slots."""

    id: str
    address: str
    machine: str
    slots: int


class HealthConfig(TypedDict, total=False):
    """The health gate's settings: its level (``names.LEVELS``), GPUs per node, the VM size's all-reduce
    floors (GB/s, on Azure), the tolerance below them, and the folder of the owner's own health tool
    (``health_source``: reports applied only when no one but root or the scheduler's user can write them)."""

    level: str
    gpus: int
    node_busbw: float
    link_busbw: float
    tolerance: float
    source: str


class _Required(TypedDict):
    cluster: str  # its name
    nodes: list[NodeConfig]  # the nodes up now (SSH: those that answered the client's probe)
    python: str  # the nodes' Python
    node_main: str  # the node code's entry point on the head node (this version's)
    meta_root: str  # the share's .batchai folder as the head node mounts it
    cluster_dir: str  # the cluster's folder on the share, as the head node mounts it
    env: dict[str, str]  # the backend's variables for every process the scheduler starts


class ClusterConfig(_Required, total=False):
    """The cluster's configuration, as ``cluster.json`` holds it."""

    pool: list[NodeConfig] | None  # every node it may have (autoscale: up to max_nodes)
    autoscale: dict[str, Any] | None  # policy/autoscale.AutoScaleSettings.to_dict()
    azure: dict[str, str] | None  # the scale set (subscription, resource_group, vmss), with autoscale
    ssh_command: list[str] | None  # how the head node reaches the others (None: all on this machine)
    health: HealthConfig | None
    idle_exit_seconds: float | None  # how long an idle scheduler waits before it exits
    keep_ended_jobs: int  # prune: how many ended jobs the database keeps
    keep_ended_days: float  # prune: for how long
    head: str  # SSH: the node the client starts this scheduler on (the head lease's, scheduler/head.py)
    down: list[str]  # nodes the client found silent as it revived the scheduler (its head node lost)
