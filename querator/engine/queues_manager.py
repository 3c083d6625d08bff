"""QueuesManager: the queues of this node -- their settings in storage and their running engines.

A queue's engine (``Queue`` and its logical queues) is spawned lazily on first use, so a restarted node
costs nothing for queues nobody touches; their partitions' lifecycles start with that first use.
"""

from __future__ import annotations

import asyncio
import logging

from querator.clock import Clock
from querator.engine.queue import Queue
from querator.errors import InvalidOption, shutting_down
from querator.storage.base import Item, QueueRecord, Store

log = logging.getLogger(__name__)


class QueuesManager:
    """Creates, finds, updates and deletes queues, and stops them all on shutdown."""

    def __init__(self, store: Store, clock: Clock, max_requests_per_queue: int = 100) -> None:
        self.store = store
        self.clock = clock
        self._max_requests = max_requests_per_queue
        self._queues: dict[str, Queue] = {}
        self._spawning = asyncio.Lock()
        self._closing = False

    async def get(self, name: str) -> Queue:
        """The running queue; 400 when no such queue exists."""
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        if self._closing:
            raise shutting_down("service")
        async with self._spawning:
            queue = self._queues.get(name)
            if queue is None:
                record = await self.store.get_queue(name)
                if record is None:
                    raise InvalidOption(f"queue does not exist; no such queue named '{name}'")
                queue = self._queues[name] = Queue(
                    record, self.store, self.clock, self._dead_letter, self._max_requests
                )
            return queue

    def running(self) -> list[Queue]:
        """The queues whose engines run on this node, by name."""
        return [self._queues[name] for name in sorted(self._queues)]

    async def record(self, name: str) -> QueueRecord | None:
        """The queue's current settings, or None."""
        queue = self._queues.get(name)
        return queue.settings if queue is not None else await self.store.get_queue(name)

    async def create(self, record: QueueRecord) -> None:
        if not await self.store.add_queue(record):
            raise InvalidOption(f"invalid queue; '{record.name}' already exists")

    async def update(self, record: QueueRecord) -> None:
        await self.store.update_queue(record)
        queue = self._queues.get(record.name)
        if queue is None:
            return
        if record.requested_partitions == queue.settings.requested_partitions:
            queue.settings = record
        else:
            # New partitions need a new engine; the next request spawns it with the new count, and not
            # before the old one has stopped writing (one writer per partition).
            async with self._spawning:
                self._queues.pop(record.name, None)
                await queue.shutdown()

    async def delete(self, name: str) -> None:
        """Removes the queue's settings and items; its waiting requests get 453."""
        record = await self.record(name)
        if record is None:
            raise InvalidOption(f"queue does not exist; no such queue named '{name}'")
        await self.store.delete_queue(name)
        queue = self._queues.pop(name, None)
        if queue is not None:
            await queue.shutdown()
        await self.store.delete_partitions(name, record.requested_partitions)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        return await self.store.list_queues(pivot, limit, namespace)

    async def _dead_letter(self, dead_queue: str, items: list[Item]) -> None:
        queue = await self.get(dead_queue)
        await queue.accept_dead(items)

    async def shutdown(self) -> None:
        """Stops every queue; requests still waiting get 453 ``queue is shutting down``."""
        self._closing = True
        queues = list(self._queues.values())
        self._queues.clear()
        await asyncio.gather(*(q.shutdown() for q in queues))
