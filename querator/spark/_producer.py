"""The sending side of one Spark task: produce requests with bounded concurrency, retries and totals.

``TaskProducer`` owns one ``AsyncClient`` (one pooled aiohttp session) per endpoint it talks to, keeps at
most ``maxInFlight`` produce requests in flight, and retries a request answered 454 or 5xx, or not
answered at all, with exponential back-off; a connection failure also moves the task to the next
endpoint. Retrying is safe because items carry dedup ids: a produce that was applied but whose reply was
lost is accepted again without enqueueing twice. Any other answer (400: unknown queue, body too large,
...) fails the task at once with the server's message, as does running out of retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from querator.client import AsyncClient, ConnectionFailed
from querator.errors import QueratorError, RetryRequest
from querator.spark._config import SinkConfig
from querator.spark._totals import WriteTotals
from querator.wire import messages as m

__all__ = ["ClientFactory", "ProduceFailed", "TaskProducer", "new_client"]

log = logging.getLogger("querator.spark")

ClientFactory = Callable[[str, SinkConfig], AsyncClient]
"""Builds the client a task uses for one endpoint; the seam tests use to inject failures."""


def new_client(endpoint: str, config: SinkConfig) -> AsyncClient:
    """The default ``ClientFactory``: a JSON ``AsyncClient`` sized for ``maxInFlight`` connections."""
    return AsyncClient(endpoint, api_key=config.api_key, limit=config.max_in_flight)


class ProduceFailed(QueratorError):
    """A produce failed for good; ``code`` is the server's (0: no answer), the message quotes it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _retryable(error: QueratorError) -> bool:
    return isinstance(error, RetryRequest | ConnectionFailed) or error.code >= 500


class TaskProducer:
    """Sends one task's items; use as ``async with``, ``await submit(items)`` per request, then ``flush()``.

    Args:
        config: the sink's settings.
        endpoints: the endpoints this task may use, the preferred one first.
        client_factory: builds the client of one endpoint.
    """

    def __init__(
        self, config: SinkConfig, endpoints: Sequence[str], client_factory: ClientFactory = new_client
    ) -> None:
        if not endpoints:
            raise ValueError("no endpoints")
        self.config = config
        self.endpoints = list(endpoints)
        self.totals = WriteTotals()
        self._factory = client_factory
        self._clients: dict[str, AsyncClient] = {}
        self._current = 0
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._pending: set[asyncio.Task[None]] = set()
        self._error: BaseException | None = None

    async def __aenter__(self) -> TaskProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancels requests still in flight and closes the clients."""
        for task in self._pending:
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    def _client(self) -> tuple[str, AsyncClient]:
        endpoint = self.endpoints[self._current % len(self.endpoints)]
        client = self._clients.get(endpoint)
        if client is None:
            client = self._clients[endpoint] = self._factory(endpoint, self.config)
        return endpoint, client

    async def submit(self, items: list[m.QueueProduceItem], size: int) -> None:
        """Starts a produce of ``items`` (one request), waiting while ``maxInFlight`` are in flight.

        Raises:
            ProduceFailed: an earlier request of this task failed for good.
        """
        self._raise_failure()
        await self._slots.acquire()
        if self._error is not None:
            self._slots.release()
            self._raise_failure()
        task = asyncio.create_task(self._send(items, size))
        self._pending.add(task)
        task.add_done_callback(self._done)
        # Let the request start writing now rather than when the caller next blocks.
        await asyncio.sleep(0)

    async def flush(self) -> WriteTotals:
        """Waits for every request in flight; returns the totals.

        Raises:
            ProduceFailed: a request failed for good.
        """
        while self._pending:
            await asyncio.wait(set(self._pending))
        self._raise_failure()
        return self.totals

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        self._slots.release()
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._error is None:
            self._error = error
            # The task is failing: the requests still in flight would only be sent again on retry.
            for other in self._pending:
                other.cancel()

    async def _send(self, items: list[m.QueueProduceItem], size: int) -> None:
        config = self.config
        delay = config.retry_backoff
        attempt = 0
        while True:
            endpoint, client = self._client()
            try:
                await client.produce(config.queue, items, config.request_timeout_text)
            except QueratorError as e:
                if not _retryable(e):
                    raise ProduceFailed(
                        f"produce to queue {config.queue!r} at {endpoint} failed; {e.code} {e.message}",
                        e.code,
                    ) from e
                if attempt >= config.retries:
                    raise ProduceFailed(
                        f"produce to queue {config.queue!r} at {endpoint} failed after {attempt + 1} "
                        f"attempts; {e.code} {e.message}",
                        e.code,
                    ) from e
                if isinstance(e, ConnectionFailed):
                    self._current += 1  # this endpoint may be down: try the next one
                attempt += 1
                self.totals.retries += 1
                log.debug("retrying a produce to %s in %.2fs: %s", endpoint, delay, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, config.max_retry_backoff)
                continue
            self.totals.requests += 1
            self.totals.items += len(items)
            self.totals.bytes += size
            return
