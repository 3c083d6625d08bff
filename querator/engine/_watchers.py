"""Watchers: callers waiting for a logical queue to hold items a lease could take, without leasing them.

Another member whose lease waits for this queue asks here (``queue.watch``) instead of probing every
owner in turn (docs/adr/0042-a-waiting-lease-watches-the-other-owners.md): the answer comes when items
arrive. Checking costs one test of an empty list per batch while nobody watches.
"""

from __future__ import annotations

import asyncio
import functools

from querator.clock import Clock, TimerHandle
from querator.engine._requests import fail_future, settle


class Watchers:
    """The watches of one logical queue; each a future answered True (items) or False (timed out)."""

    __slots__ = ("_clock", "_loop", "_waiting")

    def __init__(self, clock: Clock, loop: asyncio.AbstractEventLoop) -> None:
        self._clock = clock
        self._loop = loop
        self._waiting: dict[asyncio.Future[bool], TimerHandle] = {}

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, has_items: bool, timeout_us: int) -> asyncio.Future[bool]:
        """A watch answered True at once when ``has_items``, else when ``notify`` is called, or False
        after ``timeout_us``."""
        future: asyncio.Future[bool] = self._loop.create_future()
        if has_items:
            future.set_result(True)
            return future
        timer = self._clock.call_at(self._clock.now() + timeout_us, functools.partial(settle, future, False))
        self._waiting[future] = timer
        future.add_done_callback(self._done)
        return future

    def notify(self) -> None:
        """Items arrived: answers every watch."""
        for future in list(self._waiting):
            settle(future, True)

    def stop(self, error: BaseException) -> None:
        for future in list(self._waiting):
            fail_future(future, error)

    def _done(self, future: asyncio.Future[bool]) -> None:
        timer = self._waiting.pop(future, None)
        if timer is not None:
            timer.cancel()
