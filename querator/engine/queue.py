"""Queue: a named queue's current settings and the logical queues that own its partitions.

On one node a queue has exactly one logical queue owning every partition (as in the reference); the
routing here (produce and lease to a logical queue, partition-addressed calls to the partition's owner)
is what lets a cluster give a queue several logical queues without changing the API.
"""

from __future__ import annotations

from collections.abc import Callable

from querator.clock import Clock
from querator.engine.logical_queue import DeadLetter, LogicalQueue, LogicalStats
from querator.errors import InvalidOption, RetryRequest
from querator.storage.base import ClearOptions, Item, PartitionStats, PartitionTx, QueueRecord, Store
from querator.storage.operations import RetryEntry, import_items, moved_copies


class Queue:
    """One queue on this node."""

    def __init__(
        self, settings: QueueRecord, store: Store, clock: Clock, dead_letter: DeadLetter, max_requests: int
    ) -> None:
        self.settings = settings
        self._clock = clock
        partitions = [(n, store.partition(settings.name, n)) for n in range(settings.requested_partitions)]
        self.logical = LogicalQueue(self, partitions, clock, dead_letter, max_requests)

    @property
    def name(self) -> str:
        return self.settings.name

    def owner(self, partition: int) -> LogicalQueue:
        """The logical queue owning ``partition``; 400 when the queue has no such partition."""
        if partition < 0 or partition not in self.logical.partitions:
            raise InvalidOption(f"partition is invalid; '{partition}' is not a valid partition")
        return self.logical

    async def produce(self, items: list[Item], request_timeout: int) -> None:
        await self.logical.produce(items, request_timeout)

    async def lease(self, client_id: str, batch_size: int, request_timeout: int) -> tuple[int, list[Item]]:
        return await self.logical.lease(client_id, batch_size, request_timeout)

    async def complete(self, partition: int, ids: list[str]) -> None:
        await self.owner(partition).complete(partition, ids)

    async def retry(self, partition: int, entries: list[RetryEntry]) -> None:
        await self.owner(partition).retry(partition, entries)

    async def renew(self, partition: int, ids: list[str], lease_deadline: int) -> list[Item]:
        return await self.owner(partition).renew(partition, ids, lease_deadline)

    async def stats(self) -> list[tuple[LogicalStats, list[tuple[int, PartitionStats]]]]:
        """Per logical queue: its waiting counts and each of its partitions' storage stats."""
        waiting = self.logical.waiting()
        partitions = []
        for number in sorted(self.logical.partitions):
            try:
                stats = await self.logical.run_on(number, self._stats)
            except RetryRequest:
                # A failing partition is reported by its failures count rather than failing the call.
                stats = PartitionStats()
            partitions.append((number, stats))
        return [(waiting, partitions)]

    def _stats(self, tx: PartitionTx) -> PartitionStats:
        return tx.stats(self._clock.now())

    async def clear(self, options: ClearOptions) -> None:
        """Clears every partition it can; a failing partition is reported after the others are done."""
        failure: RetryRequest | None = None
        for number in sorted(self.logical.partitions):
            try:
                await self.logical.run_on(number, lambda tx: tx.clear(options))
            except RetryRequest as e:
                failure = failure or e
        if failure is not None:
            raise failure

    async def reload(self) -> None:
        for number in sorted(self.logical.partitions):
            await self.logical.reload(number)

    async def list_items(self, partition: int, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        return await self.owner(partition).run_on(partition, lambda tx: tx.list(pivot, limit, scheduled))

    async def import_items(self, partition: int, items: list[Item]) -> list[Item]:
        """Stores items as given (storage API); new ids, source_id duplicates skipped."""
        owner = self.owner(partition)
        new_id = owner.partitions[partition].new_id
        now: Callable[[], int] = self._clock.now
        return await owner.run_on(partition, lambda tx: import_items(tx, items, now(), new_id))

    async def delete_items(self, partition: int, ids: list[str]) -> None:
        await self.owner(partition).run_on(partition, lambda tx: tx.delete(ids))

    async def accept_dead(self, items: list[Item]) -> None:
        """Stores copies of another queue's dead items in partition 0 (idempotent per source item)."""
        copies = moved_copies(items, self._clock.now(), self.settings.expire_timeout)
        await self.import_items(0, copies)

    async def shutdown(self) -> None:
        await self.logical.shutdown()
