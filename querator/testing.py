"""A real Querator node inside the test's own process, whose time can skip ahead (docs/testing.md).

Users' tests of their tasks and workflows need a node. ``Node`` is one: the same service, HTTP routes and
memory store as ``querator serve --storage memory``, on a loopback port of the running event loop, so a
test needs no process, no port to choose and no clean-up. ``Node.skip`` moves the node's time forward:
delayed items, retries, durable sleeps and lease expiries that fall due run now, as they would once that
much time had passed, so a test of a two-day ``sleep`` takes milliseconds.

    async with Node() as node:
        async with node.running(worker):          # points the worker (or a Durable app) at the node
            await send_email.enqueue("a@example.com", delay=timedelta(days=2))
            await node.skip(timedelta(days=2))

The node's time is the wall clock plus every skip; workflow timers compare with the node's time, which
the durable runtime reads from the node (not from this machine), so they skip with it. A worker's own
waits (its back-off between lease attempts, a step's ``timeout``) stay on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import socket
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from types import TracebackType

from aiohttp import web

from querator.clock import MICROS, SystemClock, TimerHandle
from querator.durable import Durable
from querator.http import create_app, dispatch_directly
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.worker import Worker

__all__ = ["Node", "SkippingClock"]


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


class Node:
    """A Querator node on the memory store in this process, listening on a loopback port.

    ``async with Node() as node`` starts it on the running loop and stops it at the end; ``node.url`` is
    its address.
    """

    def __init__(self) -> None:
        self.clock = SkippingClock()
        self.service = Service(MemoryStore(), self.clock)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        await self.service.start()
        runner = web.AppRunner(create_app(self.service), handle_signals=False, handler_cancellation=True)
        await runner.setup()
        dispatch_directly(runner)
        sock = socket.create_server(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def close(self) -> None:
        await self.service.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def skip(self, by: timedelta | float) -> None:
        """Moves the node's time forward by ``by`` (seconds or a ``timedelta``): what falls due meanwhile
        becomes due now. Returns once the timers it made due have run."""
        self.clock.skip(by.total_seconds() if isinstance(by, timedelta) else by)
        await asyncio.sleep(0)  # the due timers run on the loop's next turn

    @contextlib.asynccontextmanager
    async def running(self, app: Worker | Durable, *, concurrency: int | None = None) -> AsyncIterator[None]:
        """Runs ``app`` (a ``Worker`` or a ``Durable`` app) against this node for the block, then stops it
        warmly: what it is running ends first. The app's endpoint becomes this node's."""
        worker = app.worker if isinstance(app, Durable) else app
        await worker.close()  # a client made before points at the app's own endpoint
        worker.connect(self.url)
        run = asyncio.create_task(worker.run(concurrency=concurrency, handle_signals=False))
        try:
            yield
        finally:
            # A run that has not started yet misses a stop: ask again until it ends.
            while not run.done():
                worker.stop()
                await asyncio.wait({run}, timeout=0.1)
            run.result()
