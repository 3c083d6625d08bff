"""The row codec: items and queue records as the tables store them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from querator.storage.base import Item, QueueRecord

_EXTRA_ENCODER: Final = msgspec.json.Encoder()
_EXTRA_DECODER: Final = msgspec.json.Decoder(dict[str, str])


def item_from_row(row: Sequence[Any]) -> Item:
    return Item(*row)


def item_arrays(items: Sequence[Item]) -> tuple[list[Any], ...]:
    """The items as one array per column (``_statements.INSERT_ITEMS``)."""
    return (
        [i.id for i in items], [i.source_id for i in items], [i.is_leased for i in items],
        [i.lease_deadline for i in items], [i.expire_deadline for i in items], [i.enqueue_at for i in items],
        [i.created_at for i in items], [i.attempts for i in items], [i.max_attempts for i in items],
        [i.reference for i in items], [i.encoding for i in items], [i.kind for i in items],
        [i.payload for i in items], [i.job_id for i in items], [i.failures for i in items],
    )  # fmt: skip


def update_arrays(items: Sequence[Item]) -> tuple[list[Any], ...]:
    """The fields ``PartitionTx.update`` writes, one array each (``_statements.UPDATE_ITEMS``)."""
    return (
        [i.id for i in items], [i.is_leased for i in items], [i.lease_deadline for i in items],
        [i.attempts for i in items], [i.enqueue_at for i in items], [i.expire_deadline for i in items],
        [i.failures for i in items],
    )  # fmt: skip


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, _EXTRA_ENCODER.encode(r.extra).decode(),
        r.dedup_window,
    )  # fmt: skip


def queue_record(row: Sequence[Any]) -> QueueRecord:
    record = QueueRecord(*row[:10])
    record.extra = _EXTRA_DECODER.decode(row[10])
    record.dedup_window = row[11]
    return record
