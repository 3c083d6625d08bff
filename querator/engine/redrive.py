"""Redrive: moving the items of a dead-letter queue into another queue (extensions.md).

Items move in FIFO order, partition by partition, a chunk at a time: copies are imported into the target
first, and only then deleted from the source. An item's copy always goes to the same target partition
(chosen from its id) and carries the item's id as its ``source_id``, which that partition refuses to
import twice; so a redrive interrupted between the two steps and run again neither loses nor duplicates
anything. (A copy already leased and completed in between could be imported again: the target would see
that item twice. Documented in docs/extensions.md.)

The partitions are reached through ``Partitions``: on a node alone they are the local engines; in a
cluster the service sends each call to the partition's owner, so any node can move a whole queue.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from querator.clock import Clock
from querator.storage.base import Item, QueueRecord
from querator.storage.operations import moved_copies

CHUNK = 1000
"""Items listed, imported and deleted per step."""


class Partitions(Protocol):
    """The storage calls a redrive makes, on any partition of any queue."""

    async def list_items_anywhere(self, queue: str, partition: int, pivot: str, limit: int) -> list[Item]:
        """Non-scheduled items with ``id >= pivot``, in id order."""

    async def import_items_anywhere(self, queue: str, partition: int, items: list[Item]) -> None:
        """Stores new items; one whose source_id the partition holds already is skipped."""

    async def delete_items_anywhere(self, queue: str, partition: int, ids: list[str]) -> None:
        """Removes items."""


async def redrive(
    partitions: Partitions, source: QueueRecord, target: QueueRecord, limit: int, deadline: int, clock: Clock
) -> int:
    """Moves up to ``limit`` (0: all) queued items of ``source`` into ``target`` until ``deadline``;
    returns how many moved. Leased and scheduled items stay where they are."""
    moved = 0
    for number in range(source.requested_partitions):
        last = ""
        while not limit or moved < limit:
            if clock.now() >= deadline:
                return moved
            listed = await partitions.list_items_anywhere(source.name, number, last, CHUNK + 1)
            listed = [i for i in listed if i.id > last]
            if not listed:
                break
            wanted = CHUNK if not limit else min(CHUNK, limit - moved)
            candidates = [i for i in listed if not i.is_leased]
            queued = candidates[:wanted]
            # Go on after what was looked at, but not past a queued item left for the next step.
            last = queued[-1].id if len(candidates) > wanted else listed[-1].id
            if queued:
                await _copy(partitions, target, queued, clock)
                await partitions.delete_items_anywhere(source.name, number, [i.id for i in queued])
                moved += len(queued)
    return moved


async def _copy(partitions: Partitions, target: QueueRecord, items: list[Item], clock: Clock) -> None:
    groups: dict[int, list[Item]] = {}
    for item in items:
        groups.setdefault(zlib.crc32(item.id.encode()) % target.requested_partitions, []).append(item)
    for number, group in groups.items():
        copies = moved_copies(group, clock.now(), target.expire_timeout, target.max_attempts)
        await partitions.import_items_anywhere(target.name, number, copies)
