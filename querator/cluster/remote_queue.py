"""RemoteQueue: a queue's partitions at another node, behind the methods of this node's own queue.

The service routes a request (``Router``), then calls the same method on whatever it got: the local
queue, or a ``RemoteQueue`` that sends the validated request to the owner over the ``Proxy`` and hands
back the owner's reply or error. So an embedding program calling the service in a cluster gets what an
HTTP client gets, and the HTTP layer never forwards anything itself.
"""

from __future__ import annotations

import logging
from typing import TypeVar

import msgspec

from querator.clock import seconds
from querator.cluster.proxy import WATCH_PATH, Proxy
from querator.cluster.router import Remote
from querator.engine.run_bytes import split_by_payload
from querator.errors import LeaseTimedOut, QueratorError
from querator.wire import messages as m

log = logging.getLogger(__name__)

M = TypeVar("M", bound=m.Message)

CALL_TIMEOUT_S = 30.0
"""Seconds a call without a request_timeout of its own may take (complete, stats, ...)."""
REPLY_MARGIN_S = 5.0
"""Seconds a forwarded lease may take beyond its request_timeout: the owner's reply on its way back."""
WRITE_MARGIN_S = 60.0
"""Seconds a forwarded produce may take beyond its request_timeout: once the owner's write started it
is always waited for (a 454 then would make the client store the items twice)."""
PROBE = "10ms"
"""The request_timeout of a lease that asks the owner for items it has now, without waiting there."""
IMPORT_CHUNK_BYTES = 8_000_000
"""Payload bytes per storage import sent to the owner: far below its body limit once encoded."""


class RemoteQueue:
    """One queue's partitions at ``owner``. Requests arrive validated; the owner validates them again."""

    __slots__ = ("_owner", "_proxy")

    def __init__(self, proxy: Proxy, owner: Remote) -> None:
        self._proxy = proxy
        self._owner = owner

    async def produce(self, req: m.QueueProduceRequest, timeout_us: int) -> m.QueueProduceResponse:
        timeout_s = seconds(timeout_us) + WRITE_MARGIN_S
        return await self._call("/v1/queue.produce", req, m.QueueProduceResponse, timeout_s)

    async def lease(self, req: m.QueueLeaseRequest, timeout_us: int) -> m.QueueLeaseResponse:
        """The owner's lease, waiting there up to the request's timeout.

        Raises:
            LeaseTimedOut: the owner had nothing to lease before the request's timeout.
        """
        timeout_s = seconds(timeout_us) + REPLY_MARGIN_S
        return await self._call("/v1/queue.lease", req, m.QueueLeaseResponse, timeout_s)

    async def lease_now(self, req: m.QueueLeaseRequest, within_s: float) -> m.QueueLeaseResponse | None:
        """The owner's lease if it has items now (it does not wait for any), within ``within_s`` seconds;
        None when it has none or cannot tell."""
        probe = msgspec.structs.replace(req, request_timeout=PROBE)
        try:
            return await self._call("/v1/queue.lease", probe, m.QueueLeaseResponse, within_s)
        except LeaseTimedOut:
            return None
        except QueratorError as e:  # the owner cannot tell: the caller asks the next one
            log.debug("lease probe of %s: %s", self._owner.node_id, e)
            return None

    async def watch(self, req: m.QueueLeaseRequest, timeout_us: int) -> None:
        """The owner's ``queue.watch`` (``lease_wait``), waiting there up to the request's timeout."""
        await self._call(WATCH_PATH, req, m.Reply, seconds(timeout_us) + REPLY_MARGIN_S)

    async def complete(self, req: m.QueueCompleteRequest) -> None:
        await self._call("/v1/queue.complete", req, m.Reply)

    async def retry(self, req: m.QueueRetryRequest) -> None:
        await self._call("/v1/queue.retry", req, m.Reply)

    async def renew(self, req: m.QueueRenewRequest, lease_timeout_us: int) -> m.QueueRenewResponse:
        """``lease_timeout_us`` is read by the owner from ``req`` (with its own clock)."""
        del lease_timeout_us
        return await self._call("/v1/queue.renew", req, m.QueueRenewResponse)

    async def stats(self, req: m.QueueStatsRequest) -> list[m.QueueLogicalStats]:
        """The owner's own logical queue (the owner does not ask the others: the request is forwarded)."""
        return (await self._call("/v1/queue.stats", req, m.QueueStatsResponse)).logical_queues

    async def clear(self, req: m.QueueClearRequest) -> None:
        await self._call("/v1/queue.clear", req, m.Reply)

    async def reload(self, req: m.QueueReloadRequest) -> None:
        await self._call("/v1/queue.reload", req, m.Reply)

    async def list_items(self, req: m.StorageItemsListRequest, scheduled: bool) -> m.StorageItemsListResponse:
        path = "/v1/storage/scheduled.list" if scheduled else "/v1/storage/items.list"
        return await self._call(path, req, m.StorageItemsListResponse)

    async def import_items(self, req: m.StorageItemsImportRequest) -> m.StorageItemsImportResponse:
        """Sent in parts of at most ``IMPORT_CHUNK_BYTES`` of payload, so that any import fits the owner's
        body limit; the parts' replies are joined."""
        stored: list[m.StorageItem] = []
        for chunk in split_by_payload(req.items, IMPORT_CHUNK_BYTES):
            part = msgspec.structs.replace(req, items=chunk)
            stored.extend(
                (await self._call("/v1/storage/items.import", part, m.StorageItemsImportResponse)).items
            )
        return m.StorageItemsImportResponse(items=stored)

    async def delete_items(self, req: m.StorageItemsDeleteRequest) -> None:
        await self._call("/v1/storage/items.delete", req, m.Reply)

    async def _call(
        self, path: str, req: m.Message, reply_type: type[M], timeout_s: float = CALL_TIMEOUT_S
    ) -> M:
        return await self._proxy.call(self._owner, path, req, reply_type, timeout_s)
