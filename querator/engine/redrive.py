"""Redrive: moving the items of a dead-letter queue into another queue (extensions.md).

Items move in FIFO order, partition by partition, a chunk at a time: copies are imported into the target
first, and only then deleted from the source. An item's copy always goes to the same target partition
(chosen from its id) and carries the item's id as its ``source_id``, which that partition refuses to
import twice; so a redrive interrupted between the two steps and run again neither loses nor duplicates
anything. (A copy already leased and completed in between could be imported again: the target would see
that item twice. Documented in docs/extensions.md.)
"""

from __future__ import annotations

import zlib

from querator.clock import Clock
from querator.engine.queue import Queue
from querator.errors import RetryRequest
from querator.storage.base import Item
from querator.storage.operations import moved_copies

CHUNK = 1000
"""Items listed, imported and deleted per step."""


async def redrive(source: Queue, target: Queue, limit: int, deadline: int, clock: Clock) -> int:
    """Moves up to ``limit`` (0: all) queued items of ``source`` into ``target`` until ``deadline``;
    returns how many moved. Leased and scheduled items stay where they are."""
    moved = 0
    for number in sorted(source.logical.partitions):
        last = ""
        while not limit or moved < limit:
            if clock.now() >= deadline:
                return moved
            listed = await source.list_items(number, last, CHUNK + 1, scheduled=False)
            listed = [i for i in listed if i.id > last]
            if not listed:
                break
            wanted = CHUNK if not limit else min(CHUNK, limit - moved)
            candidates = [i for i in listed if not i.is_leased]
            queued = candidates[:wanted]
            # Go on after what was looked at, but not past a queued item left for the next step.
            last = queued[-1].id if len(candidates) > wanted else listed[-1].id
            if queued:
                await _copy(target, queued, clock)
                await source.delete_items(number, [i.id for i in queued])
                moved += len(queued)
    return moved


async def _copy(target: Queue, items: list[Item], clock: Clock) -> None:
    settings = target.settings
    partitions = sorted(target.logical.partitions)
    if not partitions:
        # A cluster node moves into the target's partitions it owns itself.
        raise RetryRequest(
            f"internal error, try your request again; no partition of '{target.name}' is on this node"
        )
    groups: dict[int, list[Item]] = {}
    for item in items:
        groups.setdefault(partitions[zlib.crc32(item.id.encode()) % len(partitions)], []).append(item)
    for number, group in groups.items():
        copies = moved_copies(group, clock.now(), settings.expire_timeout, settings.max_attempts)
        await target.import_items(number, copies)
