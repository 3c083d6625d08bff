"""``SkippingClock``: the wall clock plus the time skipped so far."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from querator.clock import MICROS, SystemClock, TimerHandle


class _Timer:
    __slots__ = ("callback", "done", "handle", "when")

    def __init__(self, when: int, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.done = False
        self.handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self.done = True
        if self.handle is not None:
            self.handle.cancel()

    def fire(self) -> None:
        if not self.done:
            self.done = True
            self.callback()


class SkippingClock:
    """The wall clock plus the time skipped so far; a skip runs at once every timer it makes due.

    Timers are event-loop timers, as on ``SystemClock``, and are also kept in deadline order so that a
    skip finds the ones it passes without looking at the others.
    """

    def __init__(self) -> None:
        self._wall = SystemClock()
        self._skipped_us = 0
        self._timers: list[tuple[int, int, _Timer]] = []
        self._order = itertools.count()

    def now(self) -> int:
        return self._wall.now() + self._skipped_us

    def monotonic(self) -> float:
        return self._wall.monotonic() + self._skipped_us / MICROS

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        timer = _Timer(when, callback)
        loop = asyncio.get_running_loop()
        timer.handle = loop.call_later(max(0.0, (when - self.now()) / MICROS), timer.fire)
        # Timers that ran or were cancelled leave the heap when they reach its top.
        while self._timers and self._timers[0][2].done:
            heapq.heappop(self._timers)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def skip(self, seconds: float) -> None:
        """Moves time forward by ``seconds`` and runs the timers that became due, in deadline order."""
        if seconds < 0:
            raise ValueError("time only skips forward")
        self._skipped_us += round(seconds * MICROS)
        now = self.now()
        loop = asyncio.get_running_loop()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.done:
                assert timer.handle is not None
                timer.handle.cancel()
                loop.call_soon(timer.fire)
