"""The storage calls of ``AsyncClient`` (operators and debugging), mixed into it: list, import and delete
the items of one partition as they are stored."""

from __future__ import annotations

from collections.abc import Sequence

from querator.client._caller import Caller
from querator.wire import messages as m


class StorageCalls(Caller):
    """The ``storage/*`` routes; a base of ``AsyncClient``, whose ``call`` sends them."""

    async def list_items(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """Queued (not scheduled) items of one partition in FIFO order, from the first id >= ``pivot``.

        Raises:
            InvalidOption: unknown queue or partition, pivot not a valid id, negative limit.
        """
        return await self._list("/v1/storage/items.list", queue_name, partition, pivot, limit)

    async def list_scheduled(
        self, queue_name: str, partition: int, pivot: str = "", limit: int = 0
    ) -> m.StorageItemsListResponse:
        """Scheduled items of one partition, like ``list_items``."""
        return await self._list("/v1/storage/scheduled.list", queue_name, partition, pivot, limit)

    async def _list(
        self, path: str, queue_name: str, partition: int, pivot: str, limit: int
    ) -> m.StorageItemsListResponse:
        msg = m.StorageItemsListRequest(queue_name=queue_name, partition=partition, pivot=pivot, limit=limit)
        return await self.call(path, msg, m.StorageItemsListResponse, idempotent=True)

    async def import_items(
        self, queue_name: str, partition: int, items: Sequence[m.StorageItem]
    ) -> m.StorageItemsImportResponse:
        """Writes items into a partition as they are (new ids); items whose ``source_id`` exists are skipped.

        Call ``reload`` afterwards so that the queue's counters include them.

        Raises:
            InvalidOption: unknown queue or partition, no items.
        """
        msg = m.StorageItemsImportRequest(queue_name=queue_name, partition=partition, items=list(items))
        return await self.call("/v1/storage/items.import", msg, m.StorageItemsImportResponse)

    async def delete_items(self, queue_name: str, partition: int, ids: Sequence[str]) -> None:
        """Deletes items by id from a partition; unknown ids are ignored.

        Raises:
            InvalidOption: unknown queue or partition, no ids, a malformed id.
        """
        msg = m.StorageItemsDeleteRequest(queue_name=queue_name, partition=partition, ids=list(ids))
        await self._reply_call("/v1/storage/items.delete", msg, idempotent=True)
