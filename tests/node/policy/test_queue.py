"""The queue's order (node/policy/queue.py) as a pure function: priority, then first come; backfill only by
wall clock; properties over random queues."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from batchai_sdk.node.policy.queue import Holding, Waiting, plan, priority_rank

NOW = 1000.0


def test_jobs_start_in_order_while_they_fit() -> None:
    assert plan([Waiting(1, 2, None), Waiting(2, 1, None)], [], free=3, now=NOW) == [(1, 2), (2, 1)]


def test_plan_starts_higher_priority_first_then_first_come() -> None:
    low, normal, high = (priority_rank(p) for p in ("low", "normal", "High"))
    queued = [Waiting(1, 1, None, low), Waiting(2, 1, None, normal), Waiting(3, 1, None, high)]
    assert plan(queued, [], free=2, now=NOW) == [(3, 1), (2, 1)]
    same = [Waiting(5, 1, None, high), Waiting(4, 1, None, high)]
    assert plan(same, [], free=1, now=NOW) == [(4, 1)]  # equal priority: the earlier submission
    # backfill rules unchanged: the waiting high-priority job is not delayed by a lower one
    blocked = [Waiting(1, 1, 60.0, low), Waiting(2, 2, None, high)]
    assert plan(blocked, [Holding(1, NOW + 30)], free=1, now=NOW) == []
    assert plan(blocked, [Holding(1, NOW + 90)], free=1, now=NOW) == [(1, 1)]
    assert priority_rank(None) == priority_rank("unknown") == 0


def test_a_later_job_never_overtakes_a_waiting_one_without_a_wall_clock() -> None:
    # job 1 needs both nodes; one is busy for an unknown time: job 2 would hold the free one
    assert plan([Waiting(1, 2, None), Waiting(2, 1, None)], [Holding(1, None)], free=1, now=NOW) == []


def test_a_later_job_may_use_nodes_the_first_one_will_not_need() -> None:
    # 3 nodes, 2 busy: job 1 needs 2 (gets them when the 2 free up), 1 node stays spare for job 2
    queued = [Waiting(1, 2, None), Waiting(2, 1, None), Waiting(3, 1, None)]
    assert plan(queued, [Holding(2, None)], free=1, now=NOW) == [(2, 1)]


def test_backfill_by_wall_clock_only_when_it_ends_before_the_reservation() -> None:
    running = [Holding(1, NOW + 100)]
    assert plan([Waiting(1, 2, None), Waiting(2, 1, 50)], running, free=1, now=NOW) == [(2, 1)]
    assert plan([Waiting(1, 2, None), Waiting(2, 1, 500)], running, free=1, now=NOW) == []


@given(
    st.lists(st.tuples(st.integers(1, 4), st.one_of(st.none(), st.floats(1, 1000))), max_size=8),
    st.lists(st.tuples(st.integers(1, 4), st.one_of(st.none(), st.floats(NOW, NOW + 1000))), max_size=4),
    st.integers(0, 6),
)
def test_plan_properties(
    queued: list[tuple[int, float | None]], running: list[tuple[int, float | None]], free: int
) -> None:
    jobs = [Waiting(i, n, w) for i, (n, w) in enumerate(queued)]
    starts = plan(jobs, [Holding(n, e) for n, e in running], free, NOW)
    assert sum(n for _, n in starts) <= free  # never more nodes than are free
    assert [j for j, _ in starts] == sorted(j for j, _ in starts)  # in queue order
    if jobs and jobs[0].nodes <= free:
        assert starts[0] == (0, jobs[0].nodes)  # the first job starts whenever it fits
    started = {j for j, _ in starts}
    for i, job in enumerate(jobs):  # a job that fits in what its predecessors left is never skipped
        if i not in started and all(k in started for k in range(i)):
            assert job.nodes > free - sum(n for j, n in starts if j < i)
