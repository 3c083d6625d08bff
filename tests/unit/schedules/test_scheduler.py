"""The Scheduler on a FakeClock and the memory store, with a ``fire`` of the test's own: a tick is
recorded only after it fired, a failed fire is tried again, a schedule fires only on its owner, and a
new owner goes on from the stored last tick (docs/schedules.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from querator.clock import MICROS, FakeClock, from_datetime
from querator.errors import RetryRequest
from querator.schedules import Scheduler, tick_time
from querator.storage.memory import MemoryStore
from querator.storage.schedules import ScheduleRecord
from tests.conftest import eventually

START = from_datetime(datetime(2026, 1, 1, 12, tzinfo=UTC)) + MICROS // 2


class Node:
    """A scheduler with the ownership and the fire outcomes a test decides."""

    def __init__(self, store: MemoryStore, clock: FakeClock) -> None:
        self.fired: list[str] = []
        self.owns = True
        self.failures = 0
        self.scheduler = Scheduler(store, clock, lambda _: self.owns, self.fire)

    async def fire(self, record: ScheduleRecord, tick: int) -> None:
        if self.failures:
            self.failures -= 1
            raise RetryRequest("try again; the queue is moving")
        self.fired.append(f"{record.name}@{tick_time(tick)}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.add_schedule(ScheduleRecord(name="s", cron="* * * * * *", queue="q", start=START))
    yield store


@pytest.fixture
async def node(store: MemoryStore, clock: FakeClock) -> AsyncIterator[Node]:
    node = Node(store, clock)
    node.scheduler.start()
    yield node
    await node.scheduler.stop()


async def last_tick(store: MemoryStore) -> str:
    record = await store.get_schedule("s")
    assert record is not None
    return tick_time(record.last_tick) if record.last_tick else ""


async def fired_is(node: Node, expected: list[str]) -> None:
    async def check() -> bool:
        return node.fired == expected

    try:
        await eventually(check)
    except AssertionError:
        assert node.fired == expected


async def test_a_failed_fire_is_tried_again_and_recorded_only_after(
    node: Node, store: MemoryStore, clock: FakeClock
) -> None:
    clock.advance(1)
    await fired_is(node, ["s@2026-01-01T12:00:01Z"])
    assert await last_tick(store) == "2026-01-01T12:00:01Z"
    node.failures = 1
    clock.advance(1)
    await eventually(lambda: _no_failures_left(node))
    assert node.fired == ["s@2026-01-01T12:00:01Z"]
    assert await last_tick(store) == "2026-01-01T12:00:01Z"
    clock.advance(1)  # the retry, with the tick that came meanwhile
    await fired_is(node, ["s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:02Z", "s@2026-01-01T12:00:03Z"])
    assert await last_tick(store) == "2026-01-01T12:00:03Z"


async def _no_failures_left(node: Node) -> bool:
    return node.failures == 0


async def test_only_the_owner_fires_and_a_new_owner_goes_on_from_the_last_tick(
    store: MemoryStore, clock: FakeClock
) -> None:
    first, second = Node(store, clock), Node(store, clock)
    second.owns = False
    first.scheduler.start()
    second.scheduler.start()
    try:
        clock.advance(1)
        await fired_is(first, ["s@2026-01-01T12:00:01Z"])
        first.owns, second.owns = False, True  # the ring changed
        first.scheduler.changed()
        second.scheduler.changed()
        clock.advance(1)
        await fired_is(second, ["s@2026-01-01T12:00:02Z"])
        assert first.fired == ["s@2026-01-01T12:00:01Z"]
        assert await last_tick(store) == "2026-01-01T12:00:02Z"
    finally:
        await first.scheduler.stop()
        await second.scheduler.stop()


async def test_a_paused_or_deleted_schedule_fires_nothing(
    node: Node, store: MemoryStore, clock: FakeClock
) -> None:
    record = await store.get_schedule("s")
    assert record is not None
    record.paused = True
    await store.update_schedule(record)
    await store.add_schedule(ScheduleRecord(name="t", cron="* * * * * *", queue="q", start=START))
    node.scheduler.changed()
    clock.advance(1)
    await fired_is(node, ["t@2026-01-01T12:00:01Z"])
    assert await last_tick(store) == ""
    await store.delete_schedule("t")
    record.paused = False
    await store.update_schedule(record)
    node.scheduler.changed()
    clock.advance(1)
    # s was paused, not resumed through the API: its start is old, so it catches up its two ticks.
    await fired_is(node, ["t@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:02Z"])


async def test_failures_in_a_row_back_off(node: Node, store: MemoryStore, clock: FakeClock) -> None:
    node.failures = 2
    clock.advance(1)  # fails; tried again in 1 s
    await eventually(lambda: _failures_are(node, 1))
    clock.advance(1)  # fails again; tried again in 2 s
    await eventually(lambda: _failures_are(node, 0))
    clock.advance(1)
    assert node.fired == [] and await last_tick(store) == ""
    clock.advance(1)
    await fired_is(node, [f"s@2026-01-01T12:00:0{n}Z" for n in range(1, 5)])


async def _failures_are(node: Node, n: int) -> bool:
    return node.failures == n
