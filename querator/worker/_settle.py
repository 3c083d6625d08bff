"""Settling items: completes and retries of finished runs gathered into one request per partition.

Runs end one by one, but a request per item would cost the server a request per item. Each (queue,
partition) has one sender: a run's outcome joins the next request, sent as soon as the one in flight
ends, so the requests grow with the load (up to the server's 1,000 ids) and a lone run waits for none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from querator.client import AsyncClient, ConnectionFailed
from querator.errors import InvalidOption, QueratorError, RetryRequest
from querator.wire import messages as m
from querator.worker._task import MAX_BATCH

log = logging.getLogger("querator.worker")

T = TypeVar("T")

SEND_TRIES = 5
"""Requests a settlement gets before its items are left to come back when their leases end."""
SEND_WAIT_S = 0.5
"""Seconds before the second try of a settlement that failed; doubled after each further failure."""


@dataclass(slots=True)
class _Waiting:
    complete: list[tuple[tuple[str, str], asyncio.Future[None]]] = field(default_factory=list)
    """(item id, its lease token), and who waits for it."""
    retry: list[tuple[m.QueueRetryItem, asyncio.Future[None]]] = field(default_factory=list)
    sender: asyncio.Task[None] | None = None


class Settler:
    """Sends the outcomes of runs, batched per (queue, partition). ``complete`` and ``retry`` return once
    the outcome is stored; they raise ``QueratorError`` when it could not be (its lease was lost: the item
    went back to the queue and runs again; or storage kept failing: it comes back when its lease ends)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._waiting: dict[tuple[str, int], _Waiting] = {}

    async def complete(self, queue: str, partition: int, item_id: str, lease_token: str = "") -> None:
        waiting = self._join(queue, partition)
        future = asyncio.get_running_loop().create_future()
        waiting.complete.append(((item_id, lease_token), future))
        await future

    async def retry(self, queue: str, partition: int, item: m.QueueRetryItem) -> None:
        waiting = self._join(queue, partition)
        future = asyncio.get_running_loop().create_future()
        waiting.retry.append((item, future))
        await future

    def _join(self, queue: str, partition: int) -> _Waiting:
        waiting = self._waiting.get((queue, partition))
        if waiting is None:
            waiting = self._waiting[queue, partition] = _Waiting()
        if waiting.sender is None:
            waiting.sender = asyncio.create_task(self._send(queue, partition, waiting))
        return waiting

    async def _send(self, queue: str, partition: int, waiting: _Waiting) -> None:
        try:
            while waiting.complete or waiting.retry:
                completes, waiting.complete = waiting.complete[:MAX_BATCH], waiting.complete[MAX_BATCH:]
                retries, waiting.retry = waiting.retry[:MAX_BATCH], waiting.retry[MAX_BATCH:]
                await asyncio.gather(
                    self._settle(completes, lambda done: self._complete(queue, partition, done)),
                    self._settle(retries, lambda items: self._client.retry(queue, partition, items)),
                )
        finally:
            waiting.sender = None

    async def _complete(self, queue: str, partition: int, done: list[tuple[str, str]]) -> None:
        tokens = [token for _, token in done]
        ids = [item_id for item_id, _ in done]
        await self._client.complete(queue, partition, ids, lease_tokens=tokens if any(tokens) else ())

    async def _settle(
        self, batch: Sequence[tuple[T, asyncio.Future[None]]], send: Callable[[list[T]], Awaitable[None]]
    ) -> None:
        """Sends ``batch`` in one request; if the server refuses an id of it (its lease was lost), each
        alone, so that one lost lease costs only its own item."""
        if not batch:
            return
        try:
            await _sent(lambda: send([what for what, _ in batch]))
        except InvalidOption:
            await asyncio.gather(*(self._settle_one(what, future, send) for what, future in batch))
        except QueratorError as e:
            _fail(batch, e)
        else:
            for _, future in batch:
                if not future.done():
                    future.set_result(None)

    async def _settle_one(
        self, what: T, future: asyncio.Future[None], send: Callable[[list[T]], Awaitable[None]]
    ) -> None:
        try:
            await _sent(lambda: send([what]))
        except QueratorError as e:
            _fail([(what, future)], e)
        else:
            if not future.done():
                future.set_result(None)


async def _sent(send: Callable[[], Awaitable[None]]) -> None:
    """``send()``, tried again after transient failures for up to ``SEND_TRIES`` requests: the client
    tried each already where that was safe, but an outcome must not be dropped for a storage hiccup. A
    repeated complete whose first one was applied is refused (400) for its ids; the caller then settles
    them one by one, and those answer the same, which is then logged, not harmful."""
    wait_s = SEND_WAIT_S
    for tries in range(1, SEND_TRIES + 1):
        try:
            await send()
            return
        except (RetryRequest, ConnectionFailed) as e:
            if tries == SEND_TRIES:
                raise
            log.warning("settling items failed, trying again in %.1fs: %s", wait_s, e)
        await asyncio.sleep(wait_s)
        wait_s *= 2


def _fail(batch: Sequence[tuple[object, asyncio.Future[None]]], error: QueratorError) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(error)
