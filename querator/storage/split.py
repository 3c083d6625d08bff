"""SplitStore: one process's store when a node runs several (``serve --processes N``, docs/processes.md).

The processes split the partitions, so each writes its own partitions to a store of its own (``local``),
while what every process must see alike lives in one store they all open (``shared``): queue settings,
schedules, durable workflows and tenancy's records. Those writes are rare, and sqlite serialises them
between processes by its file lock. Process 0 of a sqlite node keeps today's database for both, so a
node that ran one process finds its partitions where it left them.

De-duplication records live with the partitions, in ``local``: the service sends every produce that
carries dedup ids to the process owning the queue's partition 0, so one table sees them all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from querator.storage.base import Partition, QueueRecord, Store
from querator.storage.schedules import ScheduleRecord
from querator.storage.workflows import WorkflowRows

__all__ = ["LocalStore", "SplitStore"]

log = logging.getLogger(__name__)

ALL_PARTITIONS = 4096
"""A partition count above any queue's (the service's limit): deletes every partition of a queue whose
count is no longer known, its record being gone."""


class LocalStore(Store, Protocol):
    """A store of partitions that can say which queues it holds partitions of."""

    async def partition_queues(self) -> list[str]:
        """The names of the queues with a partition in this store."""


class SplitStore:
    """Partitions and de-duplication in ``local``, everything else in ``shared`` (may be ``local``)."""

    def __init__(self, shared: Store, local: LocalStore) -> None:
        self.shared = shared
        self.local = local
        self.workflows: WorkflowRows = shared.workflows

    async def open(self) -> None:
        """Opens both stores, then drops the partitions of queues deleted while this process was away
        (the process that deleted one could not tell it)."""
        await self.shared.open()
        if self.local is self.shared:
            return
        try:
            await self.local.open()
            for name in await self.local.partition_queues():
                if await self.shared.get_queue(name) is None:
                    log.info("dropping the partitions of queue %s, deleted while this process was away", name)
                    await self.local.delete_partitions(name, ALL_PARTITIONS)
        except BaseException:
            await self.local.close()
            await self.shared.close()
            raise

    async def close(self) -> None:
        try:
            if self.local is not self.shared:
                await self.local.close()
        finally:
            await self.shared.close()

    async def check(self) -> None:
        await self.local.check()
        if self.local is not self.shared:
            await self.shared.check()

    # -- partitions: this process's own -------------------------------------------------------------------

    def partition(self, queue: str, number: int) -> Partition:
        return self.local.partition(queue, number)

    async def delete_partitions(self, queue: str, count: int) -> None:
        await self.local.delete_partitions(queue, count)

    async def forget_partitions(self, queue: str) -> None:
        """Drops this process's partitions of a queue another process deleted (its count is gone)."""
        await self.local.delete_partitions(queue, ALL_PARTITIONS)

    async def purge_dedup(self, now: int) -> int:
        return await self.local.purge_dedup(now)

    # -- queue settings, schedules and records: shared ------------------------------------------------------

    async def get_queue(self, name: str) -> QueueRecord | None:
        return await self.shared.get_queue(name)

    async def add_queue(self, record: QueueRecord) -> bool:
        return await self.shared.add_queue(record)

    async def update_queue(self, record: QueueRecord) -> None:
        await self.shared.update_queue(record)

    async def delete_queue(self, name: str) -> None:
        await self.shared.delete_queue(name)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        return await self.shared.list_queues(pivot, limit, namespace)

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        return await self.shared.get_schedule(name)

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        return await self.shared.add_schedule(record)

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        return await self.shared.update_schedule(record)

    async def delete_schedule(self, name: str) -> bool:
        return await self.shared.delete_schedule(name)

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        return await self.shared.list_schedules(pivot, limit)

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        return await self.shared.list_slot_schedules(slot, pivot, limit)

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        return await self.shared.slot_versions(slots)

    async def record_tick(self, name: str, tick: int) -> None:
        await self.shared.record_tick(name, tick)

    async def get_record(self, kind: str, key: str) -> bytes | None:
        return await self.shared.get_record(kind, key)

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        return await self.shared.add_record(kind, key, value)

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        await self.shared.put_record(kind, key, value)

    async def delete_record(self, kind: str, key: str) -> None:
        await self.shared.delete_record(kind, key)

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        return await self.shared.list_records(kind, start, end, limit)

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        await self.shared.raise_stamps(kind, stamps)

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        return await self.shared.get_stamps(kind, keys)

    async def delete_stamp(self, kind: str, key: str) -> None:
        await self.shared.delete_stamp(kind, key)
