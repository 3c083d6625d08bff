"""Queue: a named queue's current settings and the logical queue that owns its partitions on this node.

A node alone owns every partition (as in the reference). In a cluster the node's logical queue owns the
partitions the ring gives this node (``owned``), and the other nodes' logical queues the rest: the router
(``querator.cluster.router``) sends each request to the node whose logical queue can serve it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from querator.clock import Clock
from querator.engine.logical_queue import PARTITION_MOVED, DeadLetter, LogicalQueue, LogicalStats
from querator.engine.run_bytes import RUN_PAYLOAD_BYTES, split_by_payload
from querator.errors import InvalidOption, RetryRequest
from querator.storage.base import ClearOptions, Item, PartitionStats, PartitionTx, QueueRecord, Store
from querator.storage.operations import RetryEntry, import_items


class Queue:
    """One queue on this node."""

    def __init__(
        self,
        settings: QueueRecord,
        store: Store,
        clock: Clock,
        dead_letter: DeadLetter,
        max_requests: int,
        owned: Sequence[int] | None = None,
        on_stale: Callable[[int], None] | None = None,
        on_claim: Callable[[], None] | None = None,
    ) -> None:
        """``owned``: the partitions this node serves (None: all of them, a node alone, which need not
        claim them); ``on_stale``, ``on_claim``: see ``LogicalQueue``."""
        self.settings = settings
        self._clock = clock
        self._store = store
        numbers = range(settings.requested_partitions) if owned is None else owned
        self.owned = tuple(numbers)
        partitions = [(n, store.partition(settings.name, n)) for n in numbers]
        self.logical = LogicalQueue(
            self,
            partitions,
            clock,
            dead_letter,
            max_requests,
            claim=owned is not None,
            on_stale=on_stale,
            on_claim=on_claim,
        )

    @property
    def name(self) -> str:
        return self.settings.name

    def move(self, owned: Sequence[int]) -> asyncio.Future[None]:
        """Serves ``owned`` from now on: gives away the partitions not in it, claims the new ones, and
        leaves the rest serving (``LogicalQueue.move``)."""
        before = set(self.owned)
        self.owned = tuple(owned)
        give = before.difference(owned)
        take = [(n, self._store.partition(self.name, n)) for n in owned if n not in before]
        return self.logical.move(give, take)

    def owner(self, partition: int) -> LogicalQueue:
        """The logical queue owning ``partition``; 400 when the queue has no such partition."""
        self.owner_check(partition)
        if partition not in self.logical.partitions:
            raise RetryRequest(PARTITION_MOVED)
        return self.logical

    def owner_check(self, partition: int) -> None:
        """400 when the queue has no such partition."""
        if partition < 0 or partition >= self.settings.requested_partitions:
            raise InvalidOption(f"partition is invalid; '{partition}' is not a valid partition")

    # The calls that only pass a request on to the logical queue return its awaitable rather than
    # await it: a coroutine per step costs a small request measurably (docs/benchmarks-log.md).

    def produce(self, items: list[Item], request_timeout_us: int) -> Awaitable[list[str]]:
        """The ids of the items stored, in order ("" for a duplicate by dedup_id)."""
        if not self.owned:
            raise RetryRequest(PARTITION_MOVED)
        return self.logical.produce(items, request_timeout_us)

    def lease(
        self, client_id: str, batch_size: int, request_timeout_us: int
    ) -> Awaitable[tuple[int, list[Item]]]:
        if not self.owned:
            raise RetryRequest(PARTITION_MOVED)
        return self.logical.lease(client_id, batch_size, request_timeout_us)

    def until_items(self, timeout_us: int) -> Awaitable[bool]:
        """See ``LogicalQueue.until_items``."""
        if not self.owned:
            raise RetryRequest(PARTITION_MOVED)
        return self.logical.until_items(timeout_us)

    def has_items(self) -> bool:
        """See ``LogicalQueue.has_items``."""
        return self.logical.has_items()

    def failing(self) -> tuple[int, str] | None:
        """A partition of this node that is failing now, and why; None when none is."""
        return next(((n, p.error) for n, p in sorted(self.logical.partitions.items()) if p.failures), None)

    def loading(self) -> bool:
        """Whether a partition of this node is still being claimed and read (not failed: loading)."""
        return any(p.ids is None and not p.failures for p in self.logical.partitions.values())

    def complete(self, partition: int, ids: list[str], tokens: list[str] | None = None) -> Awaitable[None]:
        return self.owner(partition).complete(partition, ids, tokens)

    def retry(self, partition: int, entries: list[RetryEntry]) -> Awaitable[None]:
        return self.owner(partition).retry(partition, entries)

    def release(self, partition: int, ids: list[str]) -> None:
        """See ``LogicalQueue.release``; nothing when this node no longer serves the partition."""
        if partition in self.logical.partitions:
            self.logical.release(partition, ids)

    def renew(
        self, partition: int, ids: list[str], lease_deadline: int, tokens: list[str] | None = None
    ) -> Awaitable[list[Item]]:
        return self.owner(partition).renew(partition, ids, lease_deadline, tokens)

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
        """Stores items as given (storage API); new ids, source_id duplicates skipped. In runs of at most
        ``RUN_PAYLOAD_BYTES`` of payload, one after the other (``run_bytes``)."""
        owner = self.owner(partition)
        new_id = owner.partitions[partition].new_id
        now: Callable[[], int] = self._clock.now
        stored: list[Item] = []
        for part in split_by_payload(items, RUN_PAYLOAD_BYTES):

            def run(tx: PartitionTx, part: list[Item] = part) -> list[Item]:
                return import_items(tx, part, now(), new_id)

            stored.extend(await owner.run_on(partition, run))
        return stored

    async def delete_items(self, partition: int, ids: list[str]) -> None:
        await self.owner(partition).run_on(partition, lambda tx: tx.delete(ids))

    def stop_accepting(self, moved: bool = False) -> None:
        """See ``LogicalQueue.stop_accepting``."""
        self.logical.stop_accepting(moved)

    async def shutdown(self) -> None:
        await self.logical.shutdown()
