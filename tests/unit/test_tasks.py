"""``querator._tasks``: a long-lived task that fails is started again after a back-off, counted, and
reported as failing after ``FAILING_AFTER`` failures in a row, until a run lasts."""

from __future__ import annotations

import asyncio

from querator import _tasks
from querator.clock import FakeClock
from tests.conftest import eventually


class Flaky:
    """A task body that fails ``failures`` times, then runs until cancelled."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the disk is on fire")
        await asyncio.Event().wait()


async def test_a_failed_task_is_started_again_with_a_back_off_and_reported() -> None:
    clock = FakeClock(0)
    flaky = Flaky(failures=4)
    task = _tasks.Supervised(flaky.run, "flaky", clock)
    try:
        await eventually(lambda: _is(flaky.runs, 1))
        assert task.restarts == 1 and task.failing() == ""
        for wait_s, runs in ((1, 2), (2, 3)):  # the back-off doubles
            clock.advance(wait_s - 0.5)
            await asyncio.sleep(0)
            assert flaky.runs == runs - 1
            clock.advance(0.5)
            await eventually(lambda runs=runs: _is(flaky.runs, runs))
        assert task.restarts == 3
        assert task.failing() == (
            "background task flaky keeps failing (3 times in a row): RuntimeError: the disk is on fire"
        )
        clock.advance(4)
        await eventually(lambda: _is(flaky.runs, 4))
        clock.advance(8)
        await eventually(lambda: _is(flaky.runs, 5))  # this run lasts
        assert task.restarts == 4 and task.failing() != ""
        clock.advance(_tasks.MAX_RESTART_US / 1e6)
        await eventually(lambda: _is(task.failures, 0))
        assert task.failing() == "" and task.restarts == 4
    finally:
        await task.stop()
    assert task.task.cancelled()


async def test_a_task_that_returns_is_not_started_again() -> None:
    clock = FakeClock(0)
    runs: list[int] = []

    async def once() -> None:
        runs.append(1)

    task = _tasks.Supervised(once, "once", clock)
    await task.task
    clock.advance(60)
    await asyncio.sleep(0)
    assert runs == [1] and task.restarts == 0


async def _is(value: int, expected: int) -> bool:
    return value == expected
