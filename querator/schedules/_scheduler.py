"""The scheduler of one node: fires the ticks of the schedules this node owns (docs/schedules.md).

One task per node. It keeps the schedules read from storage (again every ``RELOAD_US``, and at once
after a change made here or a change of the ring), plans each owned, unpaused one with the pure rules of
``_calendar`` and hands every tick to fire to ``fire`` -- the seam where a target other than a queue (a
durable workflow to start) would plug in. A tick's last tick is stored only after its fire succeeded: a
crash in between fires it again on the next owner, and the dedup id of schedule and tick time makes that
second produce store nothing. The task never sleeps longer than ``MAX_SLEEP_US``: the event loop's
timers run on a monotonic clock, and a step of the wall clock must not leave a tick waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from querator import _tasks
from querator.clock import MICROS, Clock
from querator.errors import QueratorError
from querator.schedules._calendar import Calendar, Timing, plan, tick_time
from querator.storage.schedules import ScheduleRecord, ScheduleStore

log = logging.getLogger(__name__)

RELOAD_US: Final = 5 * MICROS
"""How often the schedules are read again: a change made on another node takes effect within this."""
MAX_SLEEP_US: Final = MICROS
"""The longest the task waits without looking at the time again."""
RETRY_US: Final = MICROS
"""How soon a tick whose fire failed is tried again the first time; the wait doubles with each failure
in a row, up to ``MAX_RETRY_US`` (a schedule whose queue was deleted must not flood the log)."""
MAX_RETRY_US: Final = 30 * MICROS
PAGE: Final = 1000

Fire = Callable[[ScheduleRecord, int], Awaitable[None]]
"""Produces the item of one tick of a schedule; raises when it could not."""


class Scheduler:
    """Fires the schedules ``owns`` says are this node's.

    Args:
        store: Where schedules and their last ticks are kept.
        clock: The time of every plan and timer.
        owns: Whether this node fires a schedule now (the ring, and whether the node may serve).
        fire: Produces one tick's item.
    """

    def __init__(self, store: ScheduleStore, clock: Clock, owns: Callable[[str], bool], fire: Fire) -> None:
        self._store = store
        self._clock = clock
        self._owns = owns
        self._fire = fire
        self._wake = asyncio.Event()
        self._reload = True
        self._records: list[ScheduleRecord] = []
        self._calendars: dict[tuple[str, str], Calendar] = {}
        self._retry_at: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        """Failures in a row per schedule, for the back-off."""
        self._unreadable: set[str] = set()
        """Schedules whose record this version cannot plan (logged once per reload)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = _tasks.start(self._run(), "schedules")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def changed(self) -> None:
        """A schedule or the ring changed: read the schedules again now (their last ticks too, which
        another owner may have moved)."""
        self._reload = True
        self._wake.set()

    def calendar(self, record: ScheduleRecord) -> Calendar:
        """The record's calendar, parsed once per expression and zone."""
        key = (record.cron, record.time_zone)
        found = self._calendars.get(key)
        if found is None:
            found = self._calendars[key] = Calendar(record.cron, record.time_zone)
        return found

    def timing(self, record: ScheduleRecord) -> Timing:
        return Timing(
            record.name, self.calendar(record), record.catch_up, record.catch_up_limit, record.jitter
        )

    async def _run(self) -> None:
        loaded_at = 0
        while True:
            now = self._clock.now()
            wake_at = now + MAX_SLEEP_US
            if self._reload or not loaded_at <= now < loaded_at + RELOAD_US:
                try:
                    self._reload = False
                    self._records = await self._load()
                    loaded_at = now
                    self._forget_others({r.name for r in self._records})
                except QueratorError as e:
                    log.warning("reading schedules failed (tried again): %s", e.message)
                    self._reload = True
            owned = [r for r in self._records if not r.paused and self._owns(r.name)]
            for next_at in await asyncio.gather(*(self._advance(r, now) for r in owned)):
                if next_at is not None:
                    wake_at = min(wake_at, next_at)
            await self._sleep_until(wake_at)

    def _forget_others(self, names: set[str]) -> None:
        """Drops what is kept about schedules other than ``names`` (deleted ones), and the warnings."""
        for kept in (self._retry_at, self._failures):
            for name in kept.keys() - names:
                del kept[name]
        self._unreadable.clear()

    async def _load(self) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = []
        pivot = ""
        while True:
            page = await self._store.list_schedules(pivot, PAGE)
            records.extend(r for r in page if r.name > pivot)  # the pivot is inclusive
            if len(page) < PAGE:
                return records
            pivot = page[-1].name

    async def _advance(self, record: ScheduleRecord, now: int) -> int | None:
        """Fires what is due of one schedule; returns when to look at it again."""
        retry_at = self._retry_at.get(record.name, 0)
        if now < retry_at:
            return retry_at
        try:
            found = plan(self.timing(record), max(record.start, record.last_tick), now)
        except QueratorError as e:  # a record this version cannot plan (a zone it does not know)
            if record.name not in self._unreadable:
                self._unreadable.add(record.name)
                log.warning("schedule %s cannot fire: %s", record.name, e.message)
            return None
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
