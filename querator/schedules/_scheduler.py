"""The scheduler of one node: fires the ticks of the schedules this node owns (docs/schedules.md).

One task per node. It holds the schedules of the slots it owns (``storage.schedules.schedule_slot``;
read at start and after a change of the ring), checks its slots' versions every ``RELOAD_US`` and at
once after a change of a schedule, and reads again only the slots whose version changed: its reads
follow the schedules it owns and the changes made, never every schedule (docs/adr/0041). It plans each
owned, unpaused schedule with the pure rules of
``_calendar`` and hands every tick to fire to ``fire`` -- the seam where a target other than a queue (a
durable workflow to start) would plug in. A tick's last tick is stored only after its fire succeeded: a
crash in between fires it again on the next owner, and the dedup id of schedule and tick time makes that
second produce store nothing. The task never sleeps longer than ``MAX_SLEEP_US``: the event loop's
timers run on a monotonic clock, and a step of the wall clock must not leave a tick waiting.

Each schedule held keeps when to look at it again (its next firing time, or its retry), in a heap: a
look at the schedules plans only those whose time has come, and a reading of the schedules plans again
only those whose record changed. So the work per second follows the ticks due, not the number of
schedules or the gaps of their calendars.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from querator import _tasks
from querator.clock import MICROS, Clock
from querator.errors import QueratorError
from querator.schedules._calendar import Calendar, Timing, plan, tick_time
from querator.storage.schedules import SLOTS, ScheduleRecord, ScheduleStore, schedule_slot

log = logging.getLogger(__name__)

RELOAD_US: Final = 5 * MICROS
"""How often the versions of the slots held are checked: a change made on another node that could not
tell this one takes effect within this."""
MAX_SLEEP_US: Final = MICROS
"""The longest the task waits without looking at the time again."""
RETRY_US: Final = MICROS
"""How soon a tick whose fire failed is tried again the first time; the wait doubles with each failure
in a row, up to ``MAX_RETRY_US`` (a schedule whose queue was deleted must not flood the log)."""
MAX_RETRY_US: Final = 30 * MICROS
PAGE: Final = 1000
MAX_CALENDARS: Final = 1000
"""Calendars kept for the routes (``Scheduler.calendar``), the least recently used dropped: an
expression sent in a refused create must not stay in memory for good."""
TASK: Final = "schedules"

Fire = Callable[[ScheduleRecord, int], Awaitable[None]]
"""Produces the item of one tick of a schedule; raises when it could not."""


@dataclass(slots=True)
class _Held:
    """An owned, unpaused schedule, as last read."""

    record: ScheduleRecord
    look_at: int | None
    """When to plan it again (None: not until its record changes)."""
    calendar: Calendar | None = None


class Scheduler:
    """Fires the schedules of the slots ``owns`` says are this node's.

    Args:
        store: Where schedules and their last ticks are kept.
        clock: The time of every plan and timer.
        owns: Whether this node fires the schedules of a slot now (the ring, and whether the node may
            serve); asked at each reading of every slot, which every change of the ring or of
            ``serving`` starts (``ring_changed``).
        fire: Produces one tick's item.
    """

    def __init__(self, store: ScheduleStore, clock: Clock, owns: Callable[[int], bool], fire: Fire) -> None:
        self._store = store
        self._clock = clock
        self._owns = owns
        self._fire = fire
        self._wake = asyncio.Event()
        self._resync = True
        """Read every owned slot: at start, after a change of the ring, after a failed reading."""
        self._check = False
        """Check the versions of the slots held now: a schedule changed."""
        self._checked_at = 0
        self._slots: dict[int, str] = {}
        """The slots held, with the version each had when read ("" for none)."""
        self._held: dict[str, _Held] = {}
        self._heap: list[tuple[int, str]] = []
        """``(look_at, name)`` of the schedules held; an entry whose time is no longer its schedule's
        ``look_at`` is stale and skipped."""
        self._calendars: OrderedDict[tuple[str, str], Calendar] = OrderedDict()
        self._retry_at: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        """Failures in a row per schedule, for the back-off."""
        self._broken: set[str] = set()
        """Schedules whose look raised unexpectedly (logged once until one succeeds)."""
        self.task: _tasks.Supervised | None = None

    def start(self) -> None:
        self.task = _tasks.Supervised(self._run, TASK, self._clock)

    async def stop(self) -> None:
        if self.task is not None:
            await self.task.stop()

    def changed(self) -> None:
        """A schedule changed: check the versions of the slots held now."""
        self._check = True
        self._wake.set()

    def ring_changed(self) -> None:
        """The ring or ``serving`` changed: read every owned slot again now (their last ticks too, which
        another owner may have moved)."""
        self._resync = True
        self._wake.set()

    def calendar(self, record: ScheduleRecord) -> Calendar:
        """The record's calendar, parsed once per expression and zone while it is among the
        ``MAX_CALENDARS`` used last."""
        key = (record.cron, record.time_zone)
        found = self._calendars.get(key)
        if found is None:
            found = self._calendars[key] = Calendar(record.cron, record.time_zone)
            if len(self._calendars) > MAX_CALENDARS:
                self._calendars.popitem(last=False)
        else:
            self._calendars.move_to_end(key)
        return found

    async def _run(self) -> None:
        # Started again after a failure: plan everything from what is stored, nothing from before.
        self._resync = True
        self._held, self._heap, self._slots = {}, [], {}
        while True:
            await self._sleep_until(await self.look())

    async def look(self) -> int:
        """One look at the schedules: reads them again when it is time, fires what is due; returns when
        to look again."""
        now = self._clock.now()
        if self._resync:
            try:
                self._resync = False  # before reading: a change of the ring meanwhile reads again
                await self._read([slot for slot in range(SLOTS) if self._owns(slot)], now, every=True)
            except QueratorError as e:
                log.warning("reading schedules failed (tried again): %s", e.message)
                self._resync = True
        elif self._check or not self._checked_at <= now < self._checked_at + RELOAD_US:
            try:
                self._check = False
                await self._read(list(self._slots), now, every=False)
            except QueratorError as e:
                log.warning("checking schedules failed (tried again): %s", e.message)
                self._check = True
        due = self._due(now)
        looks = await asyncio.gather(*(self._advance(held, now) for held in due))
        for held, look_at in zip(due, looks, strict=True):
            self._plan_at(held, look_at)
        wake_at = now + MAX_SLEEP_US
        if self._heap:
            wake_at = min(wake_at, self._heap[0][0])
        return wake_at

    async def _read(self, slots: list[int], now: int, every: bool) -> None:
        """Reads the schedules of ``slots`` again: all of them when ``every`` (the slots owned now, and
        nothing else held), else those whose version changed."""
        versions = await self._store.slot_versions(slots)  # before the schedules: never newer
        if every:
            self._slots = {}
        changed = [slot for slot in slots if versions.get(slot, "") != self._slots.get(slot, "")]
        records = await self._load(changed)  # (a slot without a version holds no schedule)
        read = set(slots) if every else set(changed)
        kept = {} if every else {n: h for n, h in self._held.items() if schedule_slot(n) not in read}
        self._hold(kept, records, now)
        self._slots.update((slot, versions.get(slot, "")) for slot in slots)
        self._checked_at = now

    def _hold(self, held: dict[str, _Held], records: list[ScheduleRecord], now: int) -> None:
        """Holds ``held`` and the unpaused ``records``: a schedule read as it was kept keeps its next
        look, a new or changed one is planned now."""
        for record in records:
            if record.paused:
                continue
            kept = self._held.get(record.name)
            if kept is not None and kept.record == record:
                held[record.name] = kept
                continue
            held[record.name] = _Held(record, look_at=None)
            self._plan_at(held[record.name], now)
            self._broken.discard(record.name)
        self._held = held
        for kept_of in (self._retry_at, self._failures):
            for name in kept_of.keys() - held.keys():
                del kept_of[name]
        self._broken &= held.keys()
        if len(self._heap) > 2 * len(held) + PAGE:  # mostly stale entries: rebuild
            self._heap = [(h.look_at, n) for n, h in held.items() if h.look_at is not None]
            heapq.heapify(self._heap)

    def _plan_at(self, held: _Held, look_at: int | None) -> None:
        held.look_at = look_at
        if look_at is not None:
            heapq.heappush(self._heap, (look_at, held.record.name))

    def _due(self, now: int) -> list[_Held]:
        """The held schedules whose look has come, taken off the heap."""
        due: dict[str, _Held] = {}
        while self._heap and self._heap[0][0] <= now:
            look_at, name = heapq.heappop(self._heap)
            held = self._held.get(name)
            if held is not None and held.look_at == look_at and name not in due:
                due[name] = held
        return list(due.values())

    async def _load(self, slots: list[int]) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = []
        for slot in slots:
            pivot = ""
            while True:
                page = await self._store.list_slot_schedules(slot, pivot, PAGE)
                records.extend(r for r in page if r.name > pivot)  # the pivot is inclusive
                if len(page) < PAGE:
                    break
                pivot = page[-1].name
        return records

    async def _advance(self, held: _Held, now: int) -> int | None:
        """Fires what is due of one schedule; returns when to look at it again. A schedule whose look
        fails unexpectedly backs off alone: the others go on."""
        name = held.record.name
        try:
            return await self._advance_one(held, now)
        except Exception:
            if name not in self._broken:
                self._broken.add(name)
                log.exception("schedule %s: looking at it failed (tried again later)", name)
            return self._failed(name, now)

    async def _advance_one(self, held: _Held, now: int) -> int | None:
        record = held.record
        retry_at = self._retry_at.get(record.name, 0)
        if now < retry_at:
            return retry_at
        try:
            if held.calendar is None:
                held.calendar = self.calendar(record)
            timing = Timing(record.name, held.calendar, record.catch_up, record.catch_up_limit, record.jitter)
            found = plan(timing, max(record.start, record.last_tick), now)
        except QueratorError as e:  # a record this version cannot plan (a zone it does not know)
            log.warning("schedule %s cannot fire: %s", record.name, e.message)
            return None  # until its record changes
        fired = tick = 0
        try:
            for tick in found.fire:
                await self._fire(record, tick)
                fired = tick
            done = found.passed
        except Exception as e:
            retry_at = self._failed(record.name, now)
            log.warning(
                "schedule %s: the tick %s could not fire (tried again in %.0fs): %s",
                record.name, tick_time(tick), (retry_at - now) / MICROS, e,
            )  # fmt: skip
            done = fired
        else:
            retry_at = 0
            self._retry_at.pop(record.name, None)
            self._failures.pop(record.name, None)
            self._broken.discard(record.name)
        if done > record.last_tick:
            try:
                await self._store.record_tick(record.name, done)
            except QueratorError as e:
                # Fired but not recorded: the next look fires it again, and its dedup id stores nothing.
                log.warning("schedule %s: recording the tick failed (fired again): %s", record.name, e)
                return self._failed(record.name, now)
            record.last_tick = done
        return retry_at or found.next_at

    def _failed(self, name: str, now: int) -> int:
        """Notes a failure of the schedule ``name``; returns when to try again."""
        failures = self._failures[name] = self._failures.get(name, 0) + 1
        retry_at = self._retry_at[name] = now + min(MAX_RETRY_US, RETRY_US << min(failures - 1, 16))
        return retry_at

    async def _sleep_until(self, when: int) -> None:
        timer = self._clock.call_at(when, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()
            self._wake.clear()
