"""The worker's slots: what runs at once, and the items held ahead of them (docs/adr/0053).

Each leased item takes a slot before anything else, in the order the items asked. One that cannot yet
is held ahead: it waits on a future of its own, which a freed slot or a warm stop resolves. That is
all a held item costs; an ``asyncio.Semaphore`` raced against a stop event would cost two tasks'
worth of futures and a ``wait`` for every item that has to wait, which with short tasks is most.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    """``capacity`` slots, taken first come first served; ``stop`` turns the held items away."""

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._waiting: deque[tuple[asyncio.Future[bool], bool]] = deque()
        """Each held item's future, and whether it waits on through a stop."""
        self._stopped = False

    def free(self) -> int:
        """Slots an item asking now would take at once."""
        return 0 if self._waiting else self._free

    async def take(self, through_stop: bool = False) -> bool:
        """True once a slot is the caller's (``give`` it back); False when the worker stops warmly
        first, unless ``through_stop`` (the item waits for a slot then too)."""
        if self._free and not self._waiting:
            self._free -= 1
            return True
        if self._stopped and not through_stop:
            return False
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiting = (future, through_stop)
        self._waiting.append(waiting)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.result():
                self.give()  # handed a slot as it was cancelled: pass it on
            elif waiting in self._waiting:
                self._waiting.remove(waiting)
            raise

    def give(self) -> None:
        """Hands a slot given back to the first item still held, else frees it."""
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_result(True)
                return
        self._free += 1

    def stop(self) -> None:
        """A warm stop: the held items that do not wait through it are answered False."""
        self._stopped = True
        kept: deque[tuple[asyncio.Future[bool], bool]] = deque()
        for future, through_stop in self._waiting:
            if through_stop:
                kept.append((future, through_stop))
            elif not future.done():
                future.set_result(False)
        self._waiting = kept
