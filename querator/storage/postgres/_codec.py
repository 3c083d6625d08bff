"""The row codec: items and queue records as the tables store them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from querator.storage.base import Item, QueueRecord
from querator.storage.postgres._arrays import BoolArray, ByteaArray, Int8Array
from querator.storage.postgres._pool import text

_EXTRA_ENCODER: Final = msgspec.json.Encoder()
_EXTRA_DECODER: Final = msgspec.json.Decoder(dict[str, str])


def item_from_row(row: Sequence[Any]) -> Item:
    (id_, source, leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, max_attempts,
     reference, encoding, kind, payload, job_id, failures) = row  # fmt: skip
    return Item(
        text(id_), text(source), leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts,
        max_attempts, text(reference), text(encoding), text(kind), payload, text(job_id), failures,
    )  # fmt: skip


def item_arrays(items: Sequence[Item]) -> tuple[list[Any], ...]:
    """The items as one typed array per column (``_statements.INSERT_ITEMS``, ``_arrays``)."""
    return (
        ByteaArray([i.id for i in items]), ByteaArray([i.source_id for i in items]),
        BoolArray([i.is_leased for i in items]), Int8Array([i.lease_deadline for i in items]),
        Int8Array([i.expire_deadline for i in items]), Int8Array([i.enqueue_at for i in items]),
        Int8Array([i.created_at for i in items]), Int8Array([i.attempts for i in items]),
        Int8Array([i.max_attempts for i in items]), ByteaArray([i.reference for i in items]),
        ByteaArray([i.encoding for i in items]), ByteaArray([i.kind for i in items]),
        ByteaArray([i.payload for i in items]), ByteaArray([i.job_id for i in items]),
        ByteaArray([i.failures for i in items]),
    )  # fmt: skip


def update_arrays(items: Sequence[Item]) -> tuple[list[Any], ...]:
    """The fields ``PartitionTx.update`` writes, one typed array each (``_statements.UPDATE_ITEMS``)."""
    return (
        ByteaArray([i.id for i in items]), BoolArray([i.is_leased for i in items]),
        Int8Array([i.lease_deadline for i in items]), Int8Array([i.attempts for i in items]),
        Int8Array([i.enqueue_at for i in items]), Int8Array([i.expire_deadline for i in items]),
        ByteaArray([i.failures for i in items]),
    )  # fmt: skip


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, _EXTRA_ENCODER.encode(r.extra),
        r.dedup_window,
    )  # fmt: skip


def queue_record(row: Sequence[Any]) -> QueueRecord:
    (name, namespace, lease_timeout, expire_timeout, dead_queue, max_attempts, reference, partitions,
     created_at, updated_at, extra, dedup_window) = row  # fmt: skip
    return QueueRecord(
        text(name), text(namespace), lease_timeout, expire_timeout, text(dead_queue), max_attempts,
        text(reference), partitions, created_at, updated_at, _EXTRA_DECODER.decode(extra), dedup_window,
    )  # fmt: skip
