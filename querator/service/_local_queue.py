"""LocalQueue: this node's engine of a queue, behind the methods of ``RemoteQueue``.

Requests arrive validated (``_validation``); this converts them for the engine and its answers back to
wire messages, so the service calls one set of methods wherever the partitions are.
"""

from __future__ import annotations

from querator.clock import Clock
from querator.engine.queue import Queue
from querator.errors import LeaseTimedOut
from querator.service._conversion import (
    lease_reply,
    logical_stats,
    produced_items,
    renew_reply,
    retry_entries,
    storage_item,
    stored_item,
)
from querator.storage.base import ClearOptions
from querator.storage.operations import lease_token_key
from querator.wire import messages as m


class LocalQueue:
    """The partitions of one queue this node serves."""

    __slots__ = ("_clock", "engine")

    def __init__(self, engine: Queue, clock: Clock) -> None:
        self.engine = engine
        self._clock = clock

    async def produce(self, req: m.QueueProduceRequest, timeout_us: int) -> m.QueueProduceResponse:
        ids = await self.engine.produce(produced_items(req), timeout_us)
        return m.QueueProduceResponse(code=200, ids=ids)

    async def lease(self, req: m.QueueLeaseRequest, timeout_us: int) -> m.QueueLeaseResponse:
        """Raises ``LeaseTimedOut`` when nothing came to lease within ``timeout_us``."""
        partition, items = await self.engine.lease(req.client_id, req.batch_size, timeout_us)
        return lease_reply(req.queue_name, partition, items, lease_token_key(self.engine.settings))

    def has_items(self) -> bool:
        """Whether this node's partitions hold items a lease could take now."""
        return self.engine.has_items()

    async def watch(self, req: m.QueueLeaseRequest, timeout_us: int) -> None:
        """Returns once this node's partitions hold items a lease could take; leases nothing.

        Raises:
            LeaseTimedOut: none came within ``timeout_us``.
        """
        del req  # the whole queue on this node
        if not await self.engine.until_items(timeout_us):
            raise LeaseTimedOut()

    async def complete(self, req: m.QueueCompleteRequest) -> None:
        await self.engine.complete(req.partition, list(req.ids), list(req.lease_tokens))

    async def retry(self, req: m.QueueRetryRequest) -> None:
        await self.engine.retry(req.partition, retry_entries(req))

    async def renew(self, req: m.QueueRenewRequest, lease_timeout_us: int) -> m.QueueRenewResponse:
        """``lease_timeout_us`` 0: the queue's lease timeout."""
        deadline = self._clock.now() + (lease_timeout_us or self.engine.settings.lease_timeout)
        renewed = await self.engine.renew(req.partition, list(req.ids), deadline, list(req.lease_tokens))
        return renew_reply(renewed)

    async def stats(self, req: m.QueueStatsRequest) -> list[m.QueueLogicalStats]:
        del req  # the whole queue on this node
        failures = {n: p.failures for n, p in self.engine.logical.partitions.items()}
        return [logical_stats(waiting, parts, failures) for waiting, parts in await self.engine.stats()]

    async def clear(self, req: m.QueueClearRequest) -> None:
        await self.engine.clear(
            ClearOptions(queue=req.queue, scheduled=req.scheduled, destructive=req.destructive)
        )

    async def reload(self, req: m.QueueReloadRequest) -> None:
        del req  # the whole queue on this node
        await self.engine.reload()

    async def list_items(self, req: m.StorageItemsListRequest, scheduled: bool) -> m.StorageItemsListResponse:
        """``req.limit`` is given (0 stands for the default before this is called)."""
        items = await self.engine.list_items(req.partition, req.pivot, req.limit, scheduled)
        return m.StorageItemsListResponse(items=[storage_item(i) for i in items])

    async def import_items(self, req: m.StorageItemsImportRequest) -> m.StorageItemsImportResponse:
        stored = await self.engine.import_items(req.partition, [stored_item(i) for i in req.items])
        return m.StorageItemsImportResponse(items=[storage_item(i) for i in stored])

    async def delete_items(self, req: m.StorageItemsDeleteRequest) -> None:
        await self.engine.delete_items(req.partition, list(req.ids))
