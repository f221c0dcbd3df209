"""The autoscale policy: given a cluster's settings, nodes, queue and the time, how many nodes and which go.

Runs inside the cluster's scheduler on the head node (standard library only, no import of the rest of
batchai_sdk: this file is uploaded next to the scheduler and imported there). It is a pure function:
it decides, the scheduler acts (the backend's capacity change) and logs the decision's ``reason``.

The rules, in order of precedence:

1. A node that holds a job is never removed.
2. The head node (where the scheduler runs) goes last: only when every other node goes with it.
3. Demand is the busy nodes plus the node counts of the queued jobs that can ever fit (``<= max_nodes``;
   a job that needs more is reported, not waited for). The target is that demand clamped to
   ``[min_nodes, max_nodes]``: a queued job that needs more nodes than are up grows the cluster toward
   ``max_nodes``; the cluster never drops below ``min_nodes``.
4. Above that target, idle nodes go — those idle past ``idle_seconds_before_scaledown`` (longest idle
   first); above ``max_nodes`` (the settings were lowered) idle nodes go at once. ``None`` as the idle
   limit never scales down for idleness.
5. Unusable nodes (node setup failed, unreachable) that hold no job are removed; they count for nothing,
   so a replacement is grown where the target needs one.

A ``Decision`` shrinks only by naming nodes (``remove``) — never by lowering a count and letting the
cloud choose — and grows by ``target``: remove the named nodes, then bring the count up to ``target``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_IDLE_SECONDS = 600.0  # Azure ML's idle_time_before_scale_down default is 120 s; Batch AI had none
DEFAULT_AZURE_IDLE_SECONDS = 1800.0  # an Azure cluster made without autoscale settings still scales down


class AutoScaleError(ValueError):
    """Settings that cannot be: ``field`` names the setting, ``expected`` says what would be."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"invalid {field}: {value!r}; expected {expected}")


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AutoScaleError(field, value, "an integer >= 0")
    return value


@dataclass(frozen=True)
class AutoScaleSettings:
    """Batch AI's autoScaleSettings plus Azure ML's idle time: ``min <= initial <= max``, all ``>= 0``."""

    min_nodes: int
    max_nodes: int
    initial_nodes: int | None = None  # None: min_nodes
    idle_seconds_before_scaledown: float | None = DEFAULT_IDLE_SECONDS  # None: never for idleness

    def __post_init__(self) -> None:
        _count(self.min_nodes, "min_nodes")
        _count(self.max_nodes, "max_nodes")
        if self.max_nodes < self.min_nodes:
            raise AutoScaleError("max_nodes", self.max_nodes, f"an integer >= min_nodes ({self.min_nodes})")
        if self.initial_nodes is None:
            object.__setattr__(self, "initial_nodes", self.min_nodes)
        else:
            _count(self.initial_nodes, "initial_nodes")
            if not self.min_nodes <= self.initial_nodes <= self.max_nodes:
                raise AutoScaleError(
                    "initial_nodes",
                    self.initial_nodes,
                    f"an integer from min_nodes ({self.min_nodes}) to max_nodes ({self.max_nodes})",
                )
        idle = self.idle_seconds_before_scaledown
        if idle is not None:
            if (
                isinstance(idle, bool)
                or not isinstance(idle, (int, float))
                or not math.isfinite(idle)
                or idle < 0
            ):
                raise AutoScaleError(
                    "idle_seconds_before_scaledown", idle, "a number of seconds >= 0, or None"
                )
            object.__setattr__(self, "idle_seconds_before_scaledown", float(idle))

    @property
    def initial(self) -> int:
        return self.min_nodes if self.initial_nodes is None else self.initial_nodes

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_nodes": self.min_nodes,
            "max_nodes": self.max_nodes,
            "initial_nodes": self.initial,
            "idle_seconds_before_scaledown": self.idle_seconds_before_scaledown,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AutoScaleSettings:
        return cls(
            min_nodes=data.get("min_nodes"),  # type: ignore[arg-type]  # validated in __post_init__
            max_nodes=data.get("max_nodes"),  # type: ignore[arg-type]
            initial_nodes=data.get("initial_nodes"),
            idle_seconds_before_scaledown=data.get("idle_seconds_before_scaledown", DEFAULT_IDLE_SECONDS),
        )

    def to_batchai(self) -> dict[str, int]:
        """Batch AI's ``scaleSettings.autoScale`` object."""
        return {
            "minimumNodeCount": self.min_nodes,
            "maximumNodeCount": self.max_nodes,
            "initialNodeCount": self.initial,
        }


def parse_batchai_autoscale(
    data: Mapping[str, Any] | None,
    *,
    idle_seconds_before_scaledown: float | None = DEFAULT_IDLE_SECONDS,
) -> AutoScaleSettings | None:
    """Batch AI's autoscale settings from a cluster body or the settings object itself, or None.

    Accepted: ``{"minimumNodeCount", "maximumNodeCount", "initialNodeCount"}`` (a missing
    ``minimumNodeCount`` is 0, a missing ``initialNodeCount`` the minimum), or a cluster JSON holding
    it under ``properties.scaleSettings.autoScale`` (2018-05-01), ``scaleSettings.autoScale`` or
    ``autoScaleSettings`` (2017-09-01-preview).
    Errors name the JSON field (``autoScaleSettings.maximumNodeCount``).
    """
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise AutoScaleError("autoScaleSettings", data, "an object")
    obj: Any = data
    for path in (("properties", "scaleSettings", "autoScale"), ("scaleSettings", "autoScale")):
        found: Any = data
        for key in path:
            found = found.get(key) if isinstance(found, Mapping) else None
        if found is not None:
            obj = found
            break
    else:
        props = data.get("properties")
        if "autoScaleSettings" in data:
            obj = data["autoScaleSettings"]
        elif isinstance(props, Mapping) and "autoScaleSettings" in props:
            obj = props["autoScaleSettings"]
    if not isinstance(obj, Mapping):
        raise AutoScaleError("autoScaleSettings", obj, "an object")
    if "minimumNodeCount" not in obj and "maximumNodeCount" not in obj:
        return None  # manual scale settings, or none at all
    names = {
        "minimumNodeCount": "min_nodes",
        "maximumNodeCount": "max_nodes",
        "initialNodeCount": "initial_nodes",
    }
    if "maximumNodeCount" not in obj:
        raise AutoScaleError("autoScaleSettings.maximumNodeCount", None, "an integer >= 0")
    kwargs: dict[str, Any] = {"idle_seconds_before_scaledown": idle_seconds_before_scaledown}
    for json_name, field_name in names.items():
        kwargs[field_name] = obj.get(json_name, None if json_name == "initialNodeCount" else 0)
    try:
        return AutoScaleSettings(**kwargs)
    except AutoScaleError as exc:
        json_name = next(j for j, f in names.items() if f == exc.field) if exc.field in names.values() else ""
        field = f"autoScaleSettings.{json_name}" if json_name else exc.field
        raise AutoScaleError(field, exc.value, exc.expected) from None


@dataclass(frozen=True)
class NodeView:
    """One node as the scheduler sees it.

    ``since``: epoch seconds of the node's last change — when it became idle (for an idle node), when
    it was asked for (for one still starting). ``starting``: asked for but not ready yet (it counts as up).
    """

    id: str
    busy: bool
    since: float
    head: bool = False
    starting: bool = False
    unusable: bool = False

    def idle_for(self, now: float) -> float:
        return 0.0 if self.busy or self.starting else max(0.0, now - self.since)


@dataclass(frozen=True)
class Decision:
    """What to do: remove ``remove`` (node ids), then bring the count up to ``target``."""

    current: int  # nodes up now, unusable ones included
    target: int  # nodes once the decision is carried out
    remove: tuple[str, ...]
    reason: str
    next_review: float | None = None  # when an idle node reaches its limit (wake the scheduler then)

    @property
    def changed(self) -> bool:
        return bool(self.remove) or self.target != self.current

    @property
    def grow(self) -> int:
        """Nodes to add once ``remove`` is gone."""
        return max(0, self.target - (self.current - len(self.remove)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": self.current,
            "to": self.target,
            "remove": list(self.remove),
            "reason": self.reason,
            "next_review": self.next_review,
        }


def decide(
    settings: AutoScaleSettings,
    nodes: Iterable[NodeView],
    queue: Sequence[int],
    now: float,
) -> Decision:
    """The autoscale decision for a cluster at ``now`` (epoch seconds).

    ``queue``: node counts of the jobs waiting to be placed, first come first; running jobs are
    represented by their busy nodes.
    """
    all_nodes = list(nodes)
    current = len(all_nodes)
    busy = [n for n in all_nodes if n.busy]
    dead = [n for n in all_nodes if n.unusable and not n.busy and not n.head]
    usable = [n for n in all_nodes if n not in dead]
    too_big = [need for need in queue if need > settings.max_nodes]
    queued = sum(need for need in queue if 0 < need <= settings.max_nodes)
    demand = len(busy) + queued
    wanted = min(settings.max_nodes, max(settings.min_nodes, demand))
    notes = []
    if too_big:
        notes.append(f"{len(too_big)} queued job(s) need more than max_nodes={settings.max_nodes}")
    if dead:
        notes.append(f"removing {len(dead)} unusable node(s)")

    remove: list[NodeView] = list(dead)
    next_review: float | None = None
    if wanted >= len(usable):
        target = wanted
        if wanted > len(usable):
            why = (
                f"{queued} node(s) queued, {len(busy)} busy: grow to {wanted}"
                + (f" (max_nodes={settings.max_nodes})" if demand > settings.max_nodes else "")
                if queued
                else f"below min_nodes={settings.min_nodes}: grow to {wanted}"
            )
        else:
            why = (
                f"{len(usable)} node(s) match demand {demand} "
                f"within [{settings.min_nodes}, {settings.max_nodes}]"
            )
    else:
        excess = len(usable) - wanted
        above_max = max(0, len(usable) - settings.max_nodes)
        limit = settings.idle_seconds_before_scaledown
        free = sorted((n for n in usable if not n.busy), key=lambda n: (n.head, n.since, n.id))
        # above max_nodes: free nodes go at once (starting ones too); the head last, longest idle first
        at_once = free[:above_max]
        expired = [
            n
            for n in free
            if n not in at_once
            and not n.starting
            and (n.unusable or (limit is not None and n.idle_for(now) >= limit))
        ]
        chosen = (at_once + expired)[:excess]
        head_kept = len(chosen) < len(usable) and any(n.head for n in chosen)
        if head_kept:  # the head goes only together with every other node
            chosen = [n for n in chosen if not n.head]
        remove += chosen
        target = len(usable) - len(chosen)
        if limit is not None and target > wanted:
            later = [n.since + limit for n in free if n not in chosen and n.since + limit > now]
            next_review = min(later) if later else None
        if chosen:
            kinds = []
            if at_once:
                kinds.append(f"above max_nodes={settings.max_nodes}")
            if any(n in expired for n in chosen):
                kinds.append(f"idle past {limit:g}s" if limit is not None else "unusable")
            why = (
                f"{len(chosen)} node(s) {' and '.join(kinds)}: shrink to {target} "
                f"(demand {demand}, min_nodes={settings.min_nodes})"
            )
        else:
            why = (
                f"{excess} node(s) above demand {demand}: the head node stays while other nodes are up"
                if head_kept
                else f"{excess} node(s) above demand {demand}, none idle past the limit yet"
            )
    reason = "; ".join([why, *notes])
    if remove or target != current:
        reason = f"{current} → {target}: {reason}"
    return Decision(current, target, tuple(n.id for n in remove), reason, next_review)
