"""The Scheduler on a FakeClock and the memory store, with a ``fire`` of the test's own: a tick is
recorded only after it fired, a failed fire is tried again, a schedule fires only on its owner, and a
new owner goes on from the stored last tick (docs/schedules.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from querator.clock import MICROS, FakeClock, from_datetime
from querator.errors import RetryRequest
from querator.schedules import RELOAD_US, Plan, Scheduler, Timing, plan, tick_time
from querator.schedules import _calendar as calendar_module
from querator.schedules import _scheduler as scheduler_module
from querator.storage.memory import MemoryStore
from querator.storage.schedules import ScheduleRecord, schedule_slot
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
        first.scheduler.ring_changed()
        second.scheduler.ring_changed()
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


# -- failures that are not a fire's ------------------------------------------------------------------------


async def test_a_schedule_whose_plan_raises_does_not_stop_the_others(
    store: MemoryStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception while planning one schedule stopped the scheduler task, and with it every
    schedule of the node: now that schedule backs off alone."""
    await store.add_schedule(ScheduleRecord(name="bad", cron="* * * * * *", queue="q", start=START))
    calls: list[str] = []

    def failing_plan(timing: Timing, after_us: int, now_us: int) -> Plan:
        calls.append(timing.name)
        if timing.name == "bad":
            raise RuntimeError("a bug in the calendar")
        return plan(timing, after_us, now_us)

    monkeypatch.setattr(scheduler_module, "plan", failing_plan)
    node = Node(store, clock)
    node.scheduler.start()
    try:
        clock.advance(1)
        await fired_is(node, ["s@2026-01-01T12:00:01Z"])
        for n in range(2, 7):
            clock.advance(1)
            await fired_is(node, [f"s@2026-01-01T12:00:0{t}Z" for t in range(1, n + 1)])
        assert node.scheduler.task is not None and node.scheduler.task.restarts == 0
        assert calls.count("bad") == 3 and calls.count("s") == 6  # it backs off: 1 s, then 2 s
    finally:
        await node.scheduler.stop()


async def test_a_scheduler_that_fails_is_started_again(store: MemoryStore, clock: FakeClock) -> None:
    """The scheduler task died on an unexpected exception (nothing fired again until a restart of the
    node): it is started again after a back-off, and counted."""
    broken = [True]
    node = Node(store, clock)

    def owns(_slot: int) -> bool:
        if broken[0]:
            broken[0] = False
            raise RuntimeError("the ring is confused")
        return True

    node.scheduler = Scheduler(store, clock, owns, node.fire)
    node.scheduler.start()
    try:
        await eventually(lambda: _restarts_are(node.scheduler, 1))
        clock.advance(1)  # the back-off; then the tick of 12:00:01 is due
        await fired_is(node, ["s@2026-01-01T12:00:01Z"])
        clock.advance(1)
        await fired_is(node, ["s@2026-01-01T12:00:01Z", "s@2026-01-01T12:00:02Z"])
    finally:
        await node.scheduler.stop()


async def _restarts_are(scheduler: Scheduler, n: int) -> bool:
    return scheduler.task is not None and scheduler.task.restarts == n


# -- the work of a look -------------------------------------------------------------------------------------

SPARSE = ("0 0 1 7 *", "0 0 29 2 *", "30 6 * * *")
"""Nothing due in the minute after START (12:00 UTC, 2026-01-01)."""


async def test_schedules_with_nothing_due_cost_no_calendar_work(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every look (each second) planned every schedule, and each plan walked 1000 ticks backwards:
    twenty daily schedules held a core. Now a schedule is planned when its time has come or its record
    changed, so ten thousand sparse schedules cost nothing over a minute of looks and readings."""
    store = MemoryStore()
    for n in range(10_000):
        await add(store, f"sparse-{n:05}", SPARSE[n % 3])
    for n in range(10):  # due once, at 12:00:30
        await add(store, f"due-{n}", "30 0 12 * * *")
    await add(store, "s", "* * * * * *")
    walks: dict[str, int] = {}
    walk = calendar_module._walk

    def counted(cron: str, *args: Any, **kwargs: Any) -> Iterator[int]:
        walks[cron] = walks.get(cron, 0) + 1
        return walk(cron, *args, **kwargs)

    monkeypatch.setattr(calendar_module, "_walk", counted)
    node = Node(store, clock)
    node.scheduler.start()
    try:
        clock.advance(1)
        await fired_is(node, ["s@2026-01-01T12:00:01Z"])
        planned = {cron: walks[cron] for cron in SPARSE}
        assert all(count <= 2 * 3334 for count in planned.values())  # each planned once
        for second in range(2, 60):  # eleven readings of the schedules, none changed
            clock.advance(1)
            await eventually(lambda second=second: _fired_at(node, second))
        assert {cron: walks[cron] for cron in SPARSE} == planned
        due = [f for f in node.fired if f.startswith("due-")]
        assert sorted(due) == [f"due-{n}@2026-01-01T12:00:30Z" for n in range(10)]
    finally:
        await node.scheduler.stop()


async def add(store: MemoryStore, name: str, cron: str) -> None:
    await store.add_schedule(ScheduleRecord(name=name, cron=cron, queue="q", start=START))


async def _fired_at(node: Node, second: int) -> bool:
    return f"s@2026-01-01T12:00:{second:02}Z" in node.fired


def test_the_calendars_kept_for_the_routes_are_bounded(store: MemoryStore, clock: FakeClock) -> None:
    """Every expression a create was checked with stayed parsed in memory, refused creates included."""
    scheduler = Scheduler(store, clock, lambda _: True, Node(store, clock).fire)
    for n in range(3 * scheduler_module.MAX_CALENDARS):
        cron = f"{n % 60} {n // 60 % 24} {n // 1440 + 1} * *"
        assert scheduler.calendar(ScheduleRecord(name="x", cron=cron)).cron == cron
    assert len(scheduler._calendars) == scheduler_module.MAX_CALENDARS


# -- what a member reads ------------------------------------------------------------------------------------


class CountingStore(MemoryStore):
    """Counts the schedules the scheduler reads, and its reads of slot versions."""

    def __init__(self) -> None:
        super().__init__()
        self.records_read = 0
        self.slots_listed = 0
        self.version_reads = 0

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        found = await super().list_schedules(pivot, limit)
        self.records_read += len(found)
        return found

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        found = await super().list_slot_schedules(slot, pivot, limit)
        self.slots_listed += 1
        self.records_read += len(found)
        return found

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        self.version_reads += 1
        return await super().slot_versions(slots)


async def test_a_member_reads_the_schedules_it_owns_and_then_only_changes(clock: FakeClock) -> None:
    """docs/adr/0041: every member read every schedule every 5 s (10,000 schedules and 80 members were
    160,000 reads a second). Now a member reads the schedules of the slots it owns once, then each 5 s
    one read of its slots' versions, and again only a slot whose version changed."""
    store = CountingStore()
    names = [f"sparse-{n:04}" for n in range(200)]
    for n, name in enumerate(names):
        await add(store, name, SPARSE[n % 3])
    owned = {name for name in names if schedule_slot(name) % 4 == 0}  # one member of four
    node = Node(store, clock)
    node.scheduler = Scheduler(store, clock, lambda slot: slot % 4 == 0, node.fire)
    node.scheduler.start()
    try:
        await eventually(lambda: _read_is(store, len(owned)))
        assert store.slots_listed == len({schedule_slot(name) for name in owned})  # none empty
        versions = store.version_reads
        for _ in range(12):  # a minute: twelve periods
            clock.advance(RELOAD_US / MICROS)
            await eventually(lambda versions=versions: _more_version_reads(store, versions))
            versions = store.version_reads
        assert store.records_read == len(owned)
        changed = sorted(owned)[0]
        record = await store.get_schedule(changed)
        assert record is not None
        record.cron = "15 6 * * *"
        await store.update_schedule(record)
        node.scheduler.changed()
        in_slot = sum(1 for name in names if schedule_slot(name) == schedule_slot(changed))
        await eventually(lambda: _read_is(store, len(owned) + in_slot))
        clock.advance(2 * RELOAD_US / MICROS)
        await eventually(lambda: _more_version_reads(store, versions + 1))
        assert store.records_read == len(owned) + in_slot
        assert node.fired == []
    finally:
        await node.scheduler.stop()


async def _read_is(store: CountingStore, n: int) -> bool:
    return store.records_read == n


async def _more_version_reads(store: CountingStore, than: int) -> bool:
    return store.version_reads > than
