"""Holder processes for tests/integration/test_locks.py, started with ``multiprocessing`` (spawn).

Each runs its own ``AsyncClient`` in its own process, so holders share nothing but the server and the
counters the test hands them (``multiprocessing.Value``s in shared memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event

from querator.client import AsyncClient

DEADLINE_S = 60.0


class Counters:
    """The shared counts of one test: holders inside now, the most ever inside at once, entries."""

    def __init__(
        self, inside: Synchronized[int], peak: Synchronized[int], entries: Synchronized[int]
    ) -> None:
        self.inside = inside
        self.peak = peak
        self.entries = entries

    def enter(self) -> None:
        with self.inside.get_lock():
            self.inside.value += 1
            self.entries.value += 1
            self.peak.value = max(self.peak.value, self.inside.value)

    def leave(self) -> None:
        with self.inside.get_lock():
            self.inside.value -= 1


def hold_rounds(endpoint: str, name: str, limit: int, rounds: int, counters: Counters) -> None:
    """Holds a slot of the semaphore ``name`` ``rounds`` times. Inside, it waits (with a deadline) until
    ``limit`` holders have been inside at once, so the test sees the semaphore admit that many."""

    async def main() -> None:
        async with AsyncClient(endpoint) as client:
            for _ in range(rounds):
                async with client.semaphore(name, limit=limit, ttl="10s", timeout=DEADLINE_S):
                    counters.enter()
                    try:
                        await _until(lambda: counters.peak.value >= limit)
                    finally:
                        counters.leave()

    asyncio.run(main())


def hold_forever(endpoint: str, name: str, fencing: Synchronized[int], held: Event) -> None:
    """Takes the lock ``name`` (ttl 2s), publishes its fencing token, sets ``held`` and never lets go:
    the test kills this process."""

    async def main() -> None:
        async with AsyncClient(endpoint) as client, client.lock(name, ttl="2s") as lock:
            fencing.value = lock.fencing_token
            held.set()
            await asyncio.Event().wait()

    asyncio.run(main())


async def _until(check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not check():
        if loop.time() > deadline:
            raise AssertionError("the semaphore never admitted its limit at once")
        await asyncio.sleep(0.01)
