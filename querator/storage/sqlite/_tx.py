"""``PartitionTx`` over one partition's rows, inside the writer thread's transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from querator.storage.base import ClearOptions, Deadlines, Item, PartitionStats, list_page
from querator.storage.sqlite._codec import IDS_ENCODER, item_from_row, item_row
from querator.storage.sqlite._statements import (
    SQL_CLEAR_QUEUED,
    SQL_CLEAR_SCHEDULED,
    SQL_CLEAR_UNSCHEDULED,
    SQL_DEADLINES,
    SQL_DEDUP,
    SQL_DELETE_ITEMS,
    SQL_DUE,
    SQL_EXPIRED,
    SQL_EXPIRED_LEASES,
    SQL_GET_ITEMS,
    SQL_HEAD,
    SQL_INSERT_ITEM,
    SQL_LAST_ID,
    SQL_LIST,
    SQL_LIST_SCHEDULED,
    SQL_RAISE_LAST_ID,
    SQL_SOURCE_EXISTS,
    SQL_STATS,
    SQL_UPDATE_ITEM,
)


class SqliteTx:
    """``PartitionTx`` over the items of one partition key, inside the writer thread's transaction."""

    __slots__ = ("_conn", "_key", "_queue")

    def __init__(self, conn: sqlite3.Connection, key: int, queue_name: str) -> None:
        self._conn = conn
        self._key = key
        self._queue = queue_name

    def last_id(self) -> str:
        row = self._conn.execute(SQL_LAST_ID, (self._key,)).fetchone()
        return str(row[0]) if row else ""

    def insert(self, items: Sequence[Item]) -> None:
        if not items:
            return
        key = self._key
        self._conn.executemany(SQL_INSERT_ITEM, [item_row(key, i) for i in items])
        self._conn.execute(SQL_RAISE_LAST_ID, (max(i.id for i in items), key))

    def head(self, limit: int) -> list[Item]:
        return [item_from_row(r) for r in self._conn.execute(SQL_HEAD, (self._key, limit))]

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        rows = self._conn.execute(SQL_GET_ITEMS, (self._key, IDS_ENCODER.encode(list(ids))))
        return {row[0]: item_from_row(row) for row in rows}

    def update(self, items: Sequence[Item]) -> None:
        key = self._key
        self._conn.executemany(
            SQL_UPDATE_ITEM,
            [
                (
                    int(i.is_leased),
                    i.lease_deadline,
                    i.attempts,
                    i.enqueue_at,
                    i.expire_deadline,
                    i.failures,
                    key,
                    i.id,
                )
                for i in items
            ],
        )

    def delete(self, ids: Collection[str]) -> None:
        if ids:
            self._conn.execute(SQL_DELETE_ITEMS, (self._key, IDS_ENCODER.encode(list(ids))))

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        execute = self._conn.execute
        key = self._key
        return {s for s in source_ids if s and execute(SQL_SOURCE_EXISTS, (key, s)).fetchone() is not None}

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        return [item_from_row(r) for r in self._conn.execute(SQL_EXPIRED_LEASES, (self._key, now, limit))]

    def expired(self, now: int, limit: int) -> list[Item]:
        return [item_from_row(r) for r in self._conn.execute(SQL_EXPIRED, (self._key, now, limit))]

    def due(self, now: int, limit: int) -> list[Item]:
        return [item_from_row(r) for r in self._conn.execute(SQL_DUE, (self._key, now, limit))]

    def deadlines(self) -> Deadlines:
        lease, expire, enqueue = self._conn.execute(SQL_DEADLINES, (self._key,)).fetchone()
        return Deadlines(lease_deadline=lease, expire_deadline=expire, enqueue_at=enqueue)

    def stats(self, now: int) -> PartitionStats:
        total, age, leased, left, scheduled = self._conn.execute(SQL_STATS, (now, self._key)).fetchone()
        return PartitionStats.of_sums(total, age, leased, left, scheduled)

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        ids = list(dedup_ids)
        recorded = self._conn.execute(SQL_DEDUP, (self._queue, expires_at, IDS_ENCODER.encode(ids), now))
        return set(ids).difference(row[0] for row in recorded)

    def clear(self, options: ClearOptions) -> None:
        key = (self._key,)
        if options.scheduled:
            self._conn.execute(SQL_CLEAR_SCHEDULED, key)
        if options.queue:
            self._conn.execute(SQL_CLEAR_UNSCHEDULED if options.destructive else SQL_CLEAR_QUEUED, key)

    # Last, so that ``list`` in the annotations above is still the builtin.
    def list(self, pivot: str, limit: int, scheduled: bool) -> list[Item]:
        sql = SQL_LIST_SCHEDULED if scheduled else SQL_LIST
        return list_page(map(item_from_row, self._conn.execute(sql, (self._key, pivot, limit))), limit)
