"""The row codec: items, state log rows and queue records as the tables store them."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec
from cassandra.query import BoundStatement, PreparedStatement

from querator.storage.base import DEFAULT_DEDUP_WINDOW, Item, QueueRecord
from querator.storage.cassandra._index import StateRow

# An item's metadata is one msgpack cell, not a column each: Cassandra's cost per row grows with its
# cells (a 100-row batch of 1 KiB items went 30-40% faster with 2 cells than with 13, docs/benchmarks-log.md).
_Metadata = tuple[str, bool, int, int, int, int, int, int, str, str, str, bytes, str, bytes]
"""An item's fields but its id, its payload (a cell of its own) and its dedup id, with the payload's place
kept empty so that the tuple spreads into ``Item`` after the id."""
_MetadataV1 = tuple[str, bool, int, int, int, int, int, int, str, str, str]
"""The metadata written before items had a job and failures (``storage/failures.py``)."""
ENCODER: Final = msgspec.msgpack.Encoder()
_METADATA: Final = msgspec.msgpack.Decoder(_Metadata)
_METADATA_V1: Final = msgspec.msgpack.Decoder(_MetadataV1)
# State rows are a log: each write appends ONE row holding the new states of every item it changed
# (a lease of a hundred items is one row, not a hundred), keyed by the tail's row count before the write,
# so a loader replays them in order and the latest state of an item wins.
_STATES: Final = msgspec.msgpack.Decoder(list[tuple[str, bool, _Metadata]])
_STATES_V1: Final = msgspec.msgpack.Decoder(list[tuple[str, bool, _MetadataV1]])


def metadata(i: Item) -> _Metadata:
    return (
        i.source_id, i.is_leased, i.lease_deadline, i.expire_deadline, i.enqueue_at, i.created_at,
        i.attempts, i.max_attempts, i.reference, i.encoding, i.kind, b"", i.job_id, i.failures,
    )  # fmt: skip


def _metadata(data: bytes) -> _Metadata | _MetadataV1:
    try:
        found: _Metadata | _MetadataV1 = _METADATA.decode(data)
    except msgspec.ValidationError:  # a row written before version 2 of the metadata: no job, no failures
        found = _METADATA_V1.decode(data)
    return found


def item_from_row(row: dict[str, Any]) -> Item:
    item = Item(row["id"], *_metadata(row["meta"]))
    item.payload = row.get("payload") or b""
    return item


_INT: Final = struct.Struct(">i")


def item_rows(insert: PreparedStatement, key: tuple[str, int, int], items: Iterable[Item]) -> Iterator[Any]:
    """``Statement.INSERT_ITEM`` bound to each item, its values serialized here rather than by the driver's
    ``bind``: the key is serialized once per batch and the rest are bytes already, which makes a produce
    of 100 items bind in 0.23 ms instead of 1.04 (the driver type-checks and serializes every column of
    every row)."""
    queue, partition, segment = key
    serialized_key = (queue.encode(), _INT.pack(partition), _INT.pack(segment))
    for item in items:
        statement = BoundStatement(insert)
        meta = ENCODER.encode(metadata(item))
        statement.values = [*serialized_key, item.id.encode(), meta, item.payload]
        statement.raw_values = (*key, item.id, meta, item.payload)  # what the driver's repr() shows
        yield statement


def log_key(rows: int) -> str:
    """The clustering id of a state log row: sorts as the number does."""
    return f"{rows:010d}"


def encode_states(states: Iterable[StateRow]) -> bytes:
    return ENCODER.encode([(state.item.id, state.gone, metadata(state.item)) for state in states])


def decode_states(data: bytes) -> list[StateRow]:
    try:
        rows: list[tuple[str, bool, tuple[Any, ...]]] = list(_STATES.decode(data))
    except msgspec.ValidationError:  # written before version 2 of the metadata
        rows = list(_STATES_V1.decode(data))
    return [StateRow(Item(item_id, *metadata), gone) for item_id, gone, metadata in rows]


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, r.extra, r.dedup_window,
    )  # fmt: skip


def queue_record(row: dict[str, Any]) -> QueueRecord:
    return QueueRecord(
        name=row["name"],
        namespace=row["namespace"] or "",
        lease_timeout=row["lease_timeout"] or 0,
        expire_timeout=row["expire_timeout"] or 0,
        dead_queue=row["dead_queue"] or "",
        max_attempts=row["max_attempts"] or 0,
        reference=row["reference"] or "",
        requested_partitions=row["requested_partitions"] or 0,
        created_at=row["created_at"] or 0,
        updated_at=row["updated_at"] or 0,
        extra=dict(row["extra"] or {}),
        dedup_window=DEFAULT_DEDUP_WINDOW if row["dedup_window"] is None else row["dedup_window"],
    )
