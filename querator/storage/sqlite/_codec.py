"""The row codec: items and queue records as the tables store them."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from querator.storage.base import Item, QueueRecord

_EXTRA_ENCODER: Final = msgspec.json.Encoder()
IDS_ENCODER: Final = msgspec.json.Encoder()
"""Encodes a batch of ids as the one JSON array a statement takes (``json_each``)."""
_EXTRA_DECODER: Final = msgspec.json.Decoder(dict[str, str])


def item_from_row(row: tuple[Any, ...]) -> Item:
    item = Item(*row)
    item.is_leased = bool(item.is_leased)
    return item


def item_row(key: int, i: Item) -> tuple[Any, ...]:
    return (
        key, i.id, i.source_id, int(i.is_leased), i.lease_deadline, i.expire_deadline, i.enqueue_at,
        i.created_at, i.attempts, i.max_attempts, i.reference, i.encoding, i.kind, i.payload, i.job_id,
        i.failures,
    )  # fmt: skip


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, _EXTRA_ENCODER.encode(r.extra).decode(),
        r.dedup_window,
    )  # fmt: skip


def queue_record(row: tuple[Any, ...]) -> QueueRecord:
    record = QueueRecord(*row[:10])
    record.extra = _EXTRA_DECODER.decode(row[10])
    record.dedup_window = row[11]
    return record
