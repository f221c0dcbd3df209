"""The autoscale policy (node/policy/autoscale.py): a pure function, tested by cases and by properties."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchai_sdk.node.policy import autoscale
from batchai_sdk.node.policy.autoscale import (
    AutoScaleError,
    AutoScaleSettings,
    Decision,
    NodeView,
    decide,
    parse_batchai_autoscale,
)

NOW = 1_000_000.0


def idle(nid: str, for_s: float, *, head: bool = False) -> NodeView:
    return NodeView(nid, busy=False, since=NOW - for_s, head=head)


def busy(nid: str, *, head: bool = False) -> NodeView:
    return NodeView(nid, busy=True, since=NOW - 10_000, head=head)


S = AutoScaleSettings(min_nodes=0, max_nodes=4, idle_seconds_before_scaledown=60)


# -- settings -------------------------------------------------------------------------------------------
def test_settings_default_initial_is_min_and_round_trips() -> None:
    s = AutoScaleSettings(min_nodes=1, max_nodes=3)
    assert s.initial_nodes == 1 and s.initial == 1
    assert s.idle_seconds_before_scaledown == autoscale.DEFAULT_IDLE_SECONDS
    assert AutoScaleSettings.from_dict(s.to_dict()) == s
    assert s.to_batchai() == {"minimumNodeCount": 1, "maximumNodeCount": 3, "initialNodeCount": 1}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_nodes": -1, "max_nodes": 2}, "min_nodes"),
        ({"min_nodes": 0, "max_nodes": -1}, "max_nodes"),
        ({"min_nodes": 3, "max_nodes": 2}, "max_nodes"),
        ({"min_nodes": True, "max_nodes": 2}, "min_nodes"),
        ({"min_nodes": 0, "max_nodes": 2.0}, "max_nodes"),
        ({"min_nodes": 1, "max_nodes": 2, "initial_nodes": 0}, "initial_nodes"),
        ({"min_nodes": 1, "max_nodes": 2, "initial_nodes": 3}, "initial_nodes"),
        (
            {"min_nodes": 0, "max_nodes": 2, "idle_seconds_before_scaledown": -1},
            "idle_seconds_before_scaledown",
        ),
        (
            {"min_nodes": 0, "max_nodes": 2, "idle_seconds_before_scaledown": float("nan")},
            "idle_seconds_before_scaledown",
        ),
        (
            {"min_nodes": 0, "max_nodes": 2, "idle_seconds_before_scaledown": "600"},
            "idle_seconds_before_scaledown",
        ),
    ],
)
def test_settings_refused_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(AutoScaleError) as info:
        AutoScaleSettings(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert field in str(info.value)
    assert isinstance(info.value, ValueError)


def test_settings_idle_none_and_zero_accepted() -> None:
    assert AutoScaleSettings(0, 1, idle_seconds_before_scaledown=None).idle_seconds_before_scaledown is None
    assert AutoScaleSettings(0, 1, idle_seconds_before_scaledown=0).idle_seconds_before_scaledown == 0.0


# -- Batch AI's autoScaleSettings -------------------------------------------------------------------------
def test_parse_batchai_settings_object() -> None:
    s = parse_batchai_autoscale({"minimumNodeCount": 0, "maximumNodeCount": 4, "initialNodeCount": 2})
    assert s == AutoScaleSettings(0, 4, 2)


def test_parse_batchai_initial_defaults_to_min_and_idle_passes_through() -> None:
    s = parse_batchai_autoscale(
        {"minimumNodeCount": 1, "maximumNodeCount": 2}, idle_seconds_before_scaledown=5
    )
    assert s == AutoScaleSettings(1, 2, 1, 5)
    assert parse_batchai_autoscale({"maximumNodeCount": 2}) == AutoScaleSettings(0, 2, 0)


@pytest.mark.parametrize(
    "body",
    [
        {"properties": {"scaleSettings": {"autoScale": {"minimumNodeCount": 1, "maximumNodeCount": 3}}}},
        {"scaleSettings": {"autoScale": {"minimumNodeCount": 1, "maximumNodeCount": 3}}},
        {"autoScaleSettings": {"minimumNodeCount": 1, "maximumNodeCount": 3, "initialNodeCount": 1}},
        {"properties": {"autoScaleSettings": {"minimumNodeCount": 1, "maximumNodeCount": 3}}},
    ],
)
def test_parse_batchai_from_cluster_bodies(body: dict[str, object]) -> None:
    # the 2018-05-01 cluster body and the 2017-09-01-preview one
    assert parse_batchai_autoscale(body) == AutoScaleSettings(1, 3, 1)


def test_parse_batchai_manual_or_none_is_none() -> None:
    assert parse_batchai_autoscale(None) is None
    assert (
        parse_batchai_autoscale({"properties": {"scaleSettings": {"manual": {"targetNodeCount": 2}}}}) is None
    )


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"minimumNodeCount": 3, "maximumNodeCount": 2}, "autoScaleSettings.maximumNodeCount"),
        ({"minimumNodeCount": -1, "maximumNodeCount": 2}, "autoScaleSettings.minimumNodeCount"),
        (
            {"minimumNodeCount": 1, "maximumNodeCount": 2, "initialNodeCount": 5},
            "autoScaleSettings.initialNodeCount",
        ),
        ({"minimumNodeCount": 1}, "autoScaleSettings.maximumNodeCount"),
        ({"minimumNodeCount": "1", "maximumNodeCount": 2}, "autoScaleSettings.minimumNodeCount"),
    ],
)
def test_parse_batchai_errors_name_the_json_field(obj: dict[str, object], field: str) -> None:
    with pytest.raises(AutoScaleError) as info:
        parse_batchai_autoscale(obj)
    assert info.value.field == field


def test_parse_batchai_not_an_object() -> None:
    with pytest.raises(AutoScaleError):
        parse_batchai_autoscale({"autoScaleSettings": [1, 2]})


# -- decisions: growth ---------------------------------------------------------------------------------------
def test_empty_cluster_grows_for_a_queued_job() -> None:
    d = decide(S, [], [2], NOW)
    assert (d.current, d.target, d.remove, d.grow) == (0, 2, (), 2)
    assert d.changed and "0 → 2" in d.reason and "queued" in d.reason


def test_growth_stops_at_max_nodes() -> None:
    d = decide(S, [busy("h", head=True), busy("n1")], [2, 3], NOW)
    assert d.target == 4 and d.grow == 2 and "max_nodes=4" in d.reason


def test_job_bigger_than_max_is_not_waited_for() -> None:
    d = decide(S, [], [5], NOW)
    assert d.target == 0 and not d.changed
    assert "need more than max_nodes=4" in d.reason


def test_free_nodes_already_cover_the_queue() -> None:
    d = decide(S, [idle("h", 1, head=True), idle("n1", 1)], [2], NOW)
    assert not d.changed and d.target == 2


def test_grows_to_min_nodes() -> None:
    s = AutoScaleSettings(min_nodes=2, max_nodes=4)
    d = decide(s, [idle("h", 1000, head=True)], [], NOW)
    assert d.target == 2 and d.grow == 1 and "min_nodes=2" in d.reason


def test_starting_nodes_count_as_up() -> None:
    starting = NodeView("n1", busy=False, since=NOW, starting=True)
    d = decide(S, [busy("h", head=True), starting], [1], NOW)
    assert not d.changed


# -- decisions: shrink ---------------------------------------------------------------------------------------
def test_idle_past_limit_goes_down_to_min() -> None:
    s = AutoScaleSettings(min_nodes=1, max_nodes=4, idle_seconds_before_scaledown=60)
    nodes = [idle("h", 100, head=True), idle("n1", 100), idle("n2", 30)]
    d = decide(s, nodes, [], NOW)
    assert d.remove == ("n1",) and d.target == 2
    assert d.next_review == NOW + 30  # n2 reaches the limit then
    assert "idle past 60s" in d.reason and "3 → 2" in d.reason


def test_scale_to_zero_removes_the_head_last() -> None:
    d = decide(S, [idle("h", 1000, head=True), idle("n1", 100), idle("n2", 200)], [], NOW)
    assert d.remove == ("n2", "n1", "h") and d.target == 0


def test_head_stays_while_another_node_is_busy() -> None:
    d = decide(S, [idle("h", 1000, head=True), busy("n1")], [], NOW)
    assert d.remove == () and d.target == 2
    assert "head node stays" in d.reason


def test_busy_node_is_never_removed_even_past_max() -> None:
    s = AutoScaleSettings(min_nodes=0, max_nodes=1, idle_seconds_before_scaledown=60)
    d = decide(s, [busy("h", head=True), busy("n1"), idle("n2", 0)], [], NOW)
    assert d.remove == ("n2",)  # above max: the idle node goes at once, busy ones stay
    assert d.target == 2


def test_idle_nodes_needed_by_the_queue_stay() -> None:
    # a 2-node job waits for a busy node: the idle one is needed, however long it idled
    d = decide(S, [busy("h", head=True), idle("n1", 10_000)], [2], NOW)
    assert "n1" not in d.remove and d.target >= 2


def test_no_idle_limit_never_shrinks_for_idleness() -> None:
    s = AutoScaleSettings(min_nodes=0, max_nodes=4, idle_seconds_before_scaledown=None)
    d = decide(s, [idle("h", 1e9, head=True), idle("n1", 1e9)], [], NOW)
    assert not d.changed and d.next_review is None


def test_lowered_max_removes_idle_nodes_at_once() -> None:
    s = AutoScaleSettings(min_nodes=0, max_nodes=1, idle_seconds_before_scaledown=None)
    d = decide(s, [idle("h", 1, head=True), idle("n1", 1), idle("n2", 2)], [], NOW)
    assert d.remove == ("n2", "n1") and d.target == 1 and "above max_nodes=1" in d.reason


def test_unusable_nodes_are_replaced() -> None:
    s = AutoScaleSettings(min_nodes=2, max_nodes=4)
    dead = NodeView("n1", busy=False, since=NOW, unusable=True)
    d = decide(s, [idle("h", 1, head=True), dead], [], NOW)
    assert d.remove == ("n1",) and d.target == 2 and d.grow == 1
    assert "unusable" in d.reason


def test_next_review_when_nothing_is_idle_long_enough() -> None:
    d = decide(S, [idle("h", 10, head=True), idle("n1", 50)], [], NOW)
    assert not d.changed and d.next_review == NOW + 10


def test_decision_dict() -> None:
    nodes = [NodeView("h", False, NOW - 100, head=True), NodeView("n1", True, NOW)]
    assert [n.head for n in nodes] == [True, False]
    d = decide(S, nodes, [], NOW)
    assert d.to_dict() == {"from": 2, "to": 2, "remove": [], "reason": d.reason, "next_review": None}


def test_module_is_standard_library_only() -> None:
    tree = ast.parse(Path(autoscale.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports: the file is uploaded alone"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


# -- properties --------------------------------------------------------------------------------------------
@st.composite
def scenarios(draw: st.DrawFn) -> tuple[AutoScaleSettings, list[NodeView], list[int]]:
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(lo, 8))
    limit = draw(st.one_of(st.none(), st.floats(0, 1000)))
    s = AutoScaleSettings(min_nodes=lo, max_nodes=hi, idle_seconds_before_scaledown=limit)
    count = draw(st.integers(0, 10))
    nodes = []
    for i in range(count):
        is_busy = draw(st.booleans())
        nodes.append(
            NodeView(
                f"n{i}",
                busy=is_busy,
                since=NOW - draw(st.floats(0, 2000)),
                head=i == 0,
                starting=not is_busy and draw(st.booleans()) and draw(st.booleans()),
                unusable=draw(st.integers(0, 9)) == 0,
            )
        )
    queue = draw(st.lists(st.integers(1, 10), max_size=5))
    return s, nodes, queue


def apply(decision: Decision, nodes: list[NodeView]) -> list[NodeView]:
    kept = [n for n in nodes if n.id not in decision.remove]
    kept += [NodeView(f"new{i}", busy=False, since=NOW, starting=True) for i in range(decision.grow)]
    return kept


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_properties(case: tuple[AutoScaleSettings, list[NodeView], list[int]]) -> None:
    s, nodes, queue = case
    d = decide(s, nodes, queue, NOW)
    by_id = {n.id: n for n in nodes}
    busy_ids = {n.id for n in nodes if n.busy}
    # removes only known nodes, each once, never a busy one
    assert len(set(d.remove)) == len(d.remove)
    assert set(d.remove) <= set(by_id)
    assert not set(d.remove) & busy_ids
    # shrinks only by naming nodes
    assert d.target >= d.current - len(d.remove)
    assert d.grow >= 0 and d.target == d.current - len(d.remove) + d.grow
    # the head goes only with every other node
    if any(by_id[r].head for r in d.remove):
        assert set(d.remove) == set(by_id) and d.target == 0
    # never below min_nodes
    assert d.target >= s.min_nodes
    # never above max_nodes, except for busy nodes and the head they keep up
    kept = [n for n in nodes if n.id not in d.remove]
    protected = sum(1 for n in kept if n.busy) + (
        1 if any(n.head and not n.busy for n in kept) and any(n.busy for n in kept) else 0
    )
    assert d.target <= max(s.max_nodes, protected)
    # a queued job that fits max_nodes is grown for
    fitting = sum(q for q in queue if q <= s.max_nodes)
    assert d.target >= min(s.max_nodes, max(s.min_nodes, len(busy_ids) + fitting))
    # a node removed for idleness really passed the limit (or was unusable, or above max_nodes)
    usable = [n for n in nodes if not (n.unusable and not n.busy and not n.head)]
    if len(usable) <= s.max_nodes:
        for r in d.remove:
            n = by_id[r]
            assert n.unusable or (
                s.idle_seconds_before_scaledown is not None
                and not n.starting
                and NOW - n.since >= s.idle_seconds_before_scaledown
            )
    # carried out, the decision is stable: deciding again at the same time changes nothing
    again = decide(s, apply(d, nodes), queue, NOW)
    assert not again.changed, again
