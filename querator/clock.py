"""Time for the whole service: one injectable clock, so tests can freeze and advance it.

Time inside the engine and storage is an ``int`` of microseconds since the Unix epoch (UTC): cheap to
compare, exact to store, and the precision every backend (and the reference's Postgres store) keeps.
Timers go through the clock too, so a ``FakeClock`` can fire lease expiry without anybody sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

MICROS = 1_000_000


class TimerHandle(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None:
        """Stops the callback from running; harmless if it already ran."""


class Clock(Protocol):
    """Where the service reads the time and arms its timers."""

    def now(self) -> int:
        """The current UTC time in microseconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (for measuring)."""

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        """Runs ``callback`` on the event loop once ``now() >= when``."""


async def sleep_until(clock: Clock, when: int) -> None:
    """Waits until ``clock.now() >= when`` (a FakeClock's advance wakes it, with no real waiting)."""
    woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    timer = clock.call_at(when, wake)
    try:
        await woken
    finally:
        timer.cancel()


class SystemClock:
    """The wall clock; timers are event-loop timers."""

    def now(self) -> int:
        return time.time_ns() // 1000

    def monotonic(self) -> float:
        return time.monotonic()

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        delay = max(0.0, (when - self.now()) / MICROS)
        return asyncio.get_running_loop().call_later(delay, callback)


class _FakeTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that only moves when a test calls ``advance``; due timers then run in deadline order.

    Timers armed at or before the current time run on the next loop iteration, as real ones would.
    """

    def __init__(self, start: int | None = None) -> None:
        self._now = start if start is not None else time.time_ns() // 1000
        self._timers: list[tuple[int, int, _FakeTimer]] = []
        self._order = itertools.count()

    def now(self) -> int:
        return self._now

    def monotonic(self) -> float:
        return self._now / MICROS

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(when, callback)
        if when <= self._now:
            asyncio.get_running_loop().call_soon(self._fire, timer)
        else:
            heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Moves time forward (never back) and schedules every timer that became due."""
        if seconds < 0:
            raise ValueError("a clock only moves forward")
        self._now += round(seconds * MICROS)
        loop = asyncio.get_running_loop()
        while self._timers and self._timers[0][0] <= self._now:
            _, _, timer = heapq.heappop(self._timers)
            loop.call_soon(self._fire, timer)

    def jump(self, seconds: float) -> None:
        """Steps the wall clock by ``seconds``, backwards too (an NTP step, a VM restored): timers keep
        their absolute times, so a backwards step delays them, as the engine's re-arming would."""
        if seconds >= 0:
            self.advance(seconds)
        else:
            self._now += round(seconds * MICROS)

    @staticmethod
    def _fire(timer: _FakeTimer) -> None:
        if not timer.cancelled:
            timer.callback()


def seconds(micros: int) -> float:
    """Microseconds as seconds (what asyncio and aiohttp take)."""
    return micros / MICROS


def micros(seconds: float) -> int:
    """Seconds as whole microseconds (what the engine and storage keep)."""
    return round(seconds * MICROS)


def to_datetime(micros: int) -> datetime:
    """Microseconds since the epoch as an aware UTC datetime."""
    # Zero is "no time": Go's zero time, which the reference puts on the wire for unset deadlines.
    return _EPOCH + timedelta(microseconds=micros) if micros else ZERO_TIME


def from_datetime(value: datetime) -> int:
    """An aware (or UTC-naive) datetime as microseconds since the epoch."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if value <= ZERO_TIME:
        return 0
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * MICROS + delta.microseconds


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)
