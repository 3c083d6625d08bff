"""The arrival times the distribution reads (querator/engine/backlog.py)."""

from __future__ import annotations

from querator.engine.backlog import JOIN_US, MAX_RUNS, Backlog

STEP = 2 * JOIN_US


def test_leases_take_the_oldest_and_newcomers_join_the_tail() -> None:
    b = Backlog()
    b.sync(3, now=1 * STEP)
    b.sync(5, now=2 * STEP)
    assert [b.queued_at(skip) for skip in (0, 2, 3, 4, 5)] == [STEP, STEP, 2 * STEP, 2 * STEP, None]
    b.take(4)  # a lease of four: the first run and one of the second
    assert b.queued_at() == 2 * STEP
    b.sync(3, now=3 * STEP)
    b.sync(2, now=4 * STEP)  # one left without a lease (expired): from the front
    assert b.queued_at() == 3 * STEP and b.queued_at(2) is None
    b.take(9)  # more than it holds: empty, not negative
    b.sync(2, now=5 * STEP)
    assert b.queued_at() == 5 * STEP and b.queued_at(2) is None


def test_past_max_runs_the_two_closest_in_time_merge() -> None:
    b = Backlog()
    times = [n * 10 * STEP for n in range(MAX_RUNS)]
    times[5] = times[4] + STEP  # the closest pair
    for n, at in enumerate(times):
        b.sync(n + 1, now=at)
    b.sync(MAX_RUNS + 1, now=times[-1] + 10 * STEP)
    # Run 5 joined run 4 (its item now looks as old as run 4's); every other run is as it was.
    assert b.queued_at(4) == times[4] and b.queued_at(5) == times[4] and b.queued_at(6) == times[6]
    assert b.queued_at(MAX_RUNS) == times[-1] + 10 * STEP and b.queued_at(MAX_RUNS + 1) is None


def test_items_that_come_soon_after_the_tail_run_join_it() -> None:
    b = Backlog()
    b.sync(1, now=0)
    b.sync(3, now=JOIN_US - 1)  # within JOIN_US: the same run, as old as its first items
    b.sync(4, now=JOIN_US)  # a run of its own
    assert [b.queued_at(skip) for skip in range(5)] == [0, 0, 0, JOIN_US, None]
