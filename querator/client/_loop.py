"""``LoopThread``: an event loop run by a daemon thread, for callers that block.

The blocking ``Client`` and ``querator.worker``'s ``enqueue_sync`` drive their ``AsyncClient`` on one: an
aiohttp session belongs to the loop that made it, so a loop that lives as long as its user keeps one
session and its pooled connections for every call (``asyncio.run`` per call would open a new session,
connection and handshake each time). The coroutine runs in a copy of the caller's context, so context
variables (a trace context) go with it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """A running event loop in a daemon thread (so it never blocks interpreter exit). Any number of threads
    may call ``run`` at once; never from a coroutine running on this loop (it would deadlock)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the loop and returns its result, or raises what it raised.

        Raises:
            RuntimeError: the loop is closed.
        """
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self.name} is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted (KeyboardInterrupt) or failed: make sure the call does not outlive us.
            future.cancel()
            raise

    def close(self, last: Coroutine[Any, Any, None]) -> None:
        """Runs ``last`` (which closes what lives on the loop), stops the loop and joins its thread.
        Idempotent: ``last`` is closed unrun when the loop is closed already."""
        with self._lock:
            if self._closed:
                last.close()
                return
            self._closed = True
        try:
            asyncio.run_coroutine_threadsafe(last, self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
