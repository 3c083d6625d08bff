"""``Node``: the real service, routes and memory store on a loopback port of the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from datetime import timedelta
from types import TracebackType

from aiohttp import web

from querator.durable import Durable
from querator.http import create_app, dispatch_directly
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.testing._clock import SkippingClock
from querator.worker import Worker


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
