"""Wake: what a logical queue's task sleeps on between batches."""

from __future__ import annotations

import asyncio


class Wake:
    """A flag the logical queue's task waits on, set by requests and timers, as ``asyncio.Event`` would
    be. The task is its only waiter: an Event's wait also looks up and checks its loop and keeps a list
    of waiters, costs a small request pays in full, since most of its batches are its own
    (docs/benchmarks-log.md, "Small requests")."""

    __slots__ = ("_loop", "_set", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        if not self._set:
            self._set = True
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> None:
        """Returns once set (at once if it is); one waiter at a time."""
        if self._set:
            return
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
