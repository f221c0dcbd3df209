"""The cluster's configuration: what the client builds (``HeadNodeScheduler.cluster_config``), a request
carries where ``ctl`` must start the scheduler (or the nodes changed), ``check_cluster`` checks, and the
head node keeps as ``cluster.json``. ``TypedDict``s: the record travels as JSON and mypy checks every key
read at both ends."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from .fields import ENV_NAME, HOST, NODE_ID, PRINTABLE, WEEKS_52, integer, invalid, number, string_map, text
from .names import LEVELS, NAME


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


def _nodes(value: Any, field: str) -> list[NodeConfig]:
    if not isinstance(value, list):
        raise invalid(field, value, "a list of nodes")
    out = []
    for i, node in enumerate(value):
        if not isinstance(node, dict):
            raise invalid(f"{field}[{i}]", node, "a node object")
        checked = {
            **node,
            "id": text(node, "id", NODE_ID),
            "address": text(node, "address", HOST),
            "machine": text(node, "machine", PRINTABLE),
            "slots": integer(node, "slots", 1, 4096),
        }
        out.append(cast("NodeConfig", checked))  # each field checked above
    return out


def check_cluster(cfg: Any) -> ClusterConfig:
    """The cluster configuration a request carries (and ``cluster.json`` holds), checked."""
    if not isinstance(cfg, dict):
        raise invalid("cluster", cfg, "the cluster's configuration object")
    out = dict(cfg)
    out["cluster"] = text(cfg, "cluster", NAME)
    out["nodes"] = _nodes(cfg.get("nodes"), "cluster.nodes")
    if cfg.get("pool") is not None:
        out["pool"] = _nodes(cfg["pool"], "cluster.pool")
    for field in ("python", "node_main", "meta_root", "cluster_dir"):
        value = cfg.get(field)
        absolute = field == "python" or (isinstance(value, str) and value.startswith("/"))
        if not isinstance(value, str) or not value or "\0" in value or not absolute:
            raise invalid(f"cluster.{field}", value, "a program" if field == "python" else "an absolute path")
    command = cfg.get("ssh_command")
    words_ok = isinstance(command, list) and all(isinstance(w, str) and "\0" not in w for w in command)
    if command is not None and not (command and words_ok):
        raise invalid("cluster.ssh_command", command, "a command (a list of strings) or null")
    out["env"] = string_map(cfg, "env", ENV_NAME)
    if cfg.get("autoscale") is not None:
        if not isinstance(cfg["autoscale"], dict):
            raise invalid("cluster.autoscale", cfg["autoscale"], "the autoscale settings or null")
        from ..policy.autoscale import AutoScaleSettings  # only where a cluster scales: it loads dataclasses

        try:
            AutoScaleSettings.from_dict(cfg["autoscale"])
        except (ValueError, TypeError) as exc:
            raise invalid("cluster.autoscale", cfg["autoscale"], f"valid settings ({exc})") from None
    azure = cfg.get("azure")
    scale_set = ("subscription", "resource_group", "vmss")
    if azure is not None and not (
        isinstance(azure, dict) and all(isinstance(azure.get(k), str) for k in scale_set)
    ):
        raise invalid("cluster.azure", azure, "the scale set (subscription, resource_group, vmss) or null")
    if cfg.get("head") is not None:  # the node the client started this scheduler on (head.py)
        out["head"] = text(cfg, "head", NODE_ID)
    if cfg.get("down") is not None:  # nodes the client found silent as it revived the scheduler
        down = cfg["down"]
        if not isinstance(down, list) or not all(isinstance(n, str) and NODE_ID.match(n) for n in down):
            raise invalid("cluster.down", down, "a list of node ids")
        out["down"] = list(down)
    if cfg.get("idle_exit_seconds") is not None:
        out["idle_exit_seconds"] = number(cfg, "idle_exit_seconds", 0, WEEKS_52)
    if cfg.get("health") is not None:
        out["health"] = check_health(cfg["health"])
    return cast("ClusterConfig", out)  # each field checked above


def check_health(health: Any) -> HealthConfig:
    """The health gate's settings (``HeadNodeScheduler.health_settings``)."""
    if not isinstance(health, dict):
        raise invalid("cluster.health", health, "the health gate's settings or null")
    if health.get("level") not in LEVELS:
        raise invalid("cluster.health.level", health.get("level"), f"one of {', '.join(LEVELS)}")
    out = {
        "level": health["level"],
        "gpus": integer(health, "gpus", 0, 64, optional=True) or 0,
        "node_busbw": number(health, "node_busbw", 0, 1e6),
        "link_busbw": number(health, "link_busbw", 0, 1e6),
        "tolerance": number(health, "tolerance", 0, 1),
        "source": health.get("source"),
    }
    source = out["source"]
    if source is not None and not (isinstance(source, str) and source.startswith("/") and "\0" not in source):
        raise invalid("cluster.health.source", source, "an absolute folder path")
    return cast("HealthConfig", {k: v for k, v in out.items() if v is not None})
