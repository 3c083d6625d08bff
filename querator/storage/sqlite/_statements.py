"""Every SQL statement the backend runs on its tables (``_schema``)."""

from __future__ import annotations

from typing import Final

_COLUMNS = (
    "id, source_id, is_leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, "
    "max_attempts, reference, encoding, kind, payload, job_id, failures"
)
"""Item columns in the order of ``Item``'s fields."""
_ITEM_VALUES = ", ".join("?" * 16)
"""The placeholders of an item's row: its partition's key, then ``_COLUMNS``."""

SQL_INSERT_ITEM: Final = f"INSERT INTO items (part, {_COLUMNS}) VALUES ({_ITEM_VALUES})"
# Only the lease and schedule fields change while an item keeps its id (see PartitionTx.update).
SQL_UPDATE_ITEM: Final = (
    "UPDATE items SET is_leased = ?, lease_deadline = ?, attempts = ?, enqueue_at = ?, expire_deadline = ?, "
    "failures = ? WHERE part = ? AND id = ?"
)
# One statement for a whole batch of ids: the ids travel as one JSON array.
SQL_DELETE_ITEMS: Final = "DELETE FROM items WHERE part = ? AND id IN (SELECT value FROM json_each(?))"
SQL_GET_ITEMS: Final = (
    f"SELECT {_COLUMNS} FROM items WHERE part = ? AND id IN (SELECT value FROM json_each(?))"
)
SQL_HEAD: Final = (
    f"SELECT {_COLUMNS} FROM items INDEXED BY items_queued "
    "WHERE part = ? AND is_leased = 0 AND enqueue_at = 0 ORDER BY id LIMIT ?"
)
SQL_SOURCE_EXISTS: Final = (
    "SELECT 1 FROM items INDEXED BY items_source WHERE part = ? AND source_id = ? AND source_id <> '' LIMIT 1"
)
SQL_EXPIRED_LEASES: Final = (
    f"SELECT {_COLUMNS} FROM items INDEXED BY items_leased "
    "WHERE part = ? AND is_leased = 1 AND enqueue_at = 0 AND lease_deadline < ? "
    "ORDER BY lease_deadline LIMIT ?"
)
SQL_EXPIRED: Final = (
    f"SELECT {_COLUMNS} FROM items INDEXED BY items_expiring "
    "WHERE part = ? AND enqueue_at = 0 AND expire_deadline > 0 AND expire_deadline < ? "
    "ORDER BY expire_deadline LIMIT ?"
)
# Due items come back in id order, but are found through enqueue_at: few of many scheduled items are due
# when the lifecycle runs, and the sort only ever holds LIMIT rows.
SQL_DUE: Final = (
    f"SELECT {_COLUMNS} FROM items INDEXED BY items_scheduled_at "
    "WHERE part = ? AND enqueue_at > 0 AND enqueue_at < ? ORDER BY id LIMIT ?"
)
SQL_DEADLINES: Final = (
    "SELECT "
    "coalesce((SELECT lease_deadline FROM items INDEXED BY items_leased "
    "WHERE part = ?1 AND is_leased = 1 AND enqueue_at = 0 ORDER BY lease_deadline LIMIT 1), 0), "
    "coalesce((SELECT expire_deadline FROM items INDEXED BY items_expiring "
    "WHERE part = ?1 AND enqueue_at = 0 AND expire_deadline > 0 ORDER BY expire_deadline LIMIT 1), 0), "
    "coalesce((SELECT enqueue_at FROM items INDEXED BY items_scheduled_at "
    "WHERE part = ?1 AND enqueue_at > 0 ORDER BY enqueue_at LIMIT 1), 0)"
)
SQL_LIST: Final = (
    f"SELECT {_COLUMNS} FROM items WHERE part = ? AND enqueue_at = 0 AND id >= ? ORDER BY id LIMIT ?"
)
SQL_LIST_SCHEDULED: Final = (
    f"SELECT {_COLUMNS} FROM items INDEXED BY items_scheduled "
    "WHERE part = ? AND enqueue_at > 0 AND id >= ? ORDER BY id LIMIT ?"
)
# total() rather than sum(): a float never overflows, and it is exact while the sum stays below 2**53.
SQL_STATS: Final = (
    "SELECT "
    "count(*) FILTER (WHERE enqueue_at = 0), "
    "total(?1 - created_at) FILTER (WHERE enqueue_at = 0), "
    "count(*) FILTER (WHERE enqueue_at = 0 AND is_leased = 1), "
    "total(lease_deadline - ?1) FILTER (WHERE enqueue_at = 0 AND is_leased = 1), "
    "count(*) FILTER (WHERE enqueue_at > 0) "
    "FROM items WHERE part = ?2"
)
SQL_CLEAR_QUEUED: Final = (
    "DELETE FROM items INDEXED BY items_queued WHERE part = ? AND is_leased = 0 AND enqueue_at = 0"
)
SQL_CLEAR_UNSCHEDULED: Final = "DELETE FROM items WHERE part = ? AND enqueue_at = 0"
SQL_CLEAR_SCHEDULED: Final = (
    "DELETE FROM items INDEXED BY items_scheduled_at WHERE part = ? AND enqueue_at > 0"
)

# Records every id of the batch at once and returns those recorded now; the others were seen within
# the window. An expired record is taken over: its window starts again from now. ("WHERE true" lets
# sqlite tell the upsert clause from a join constraint.)
SQL_DEDUP: Final = (
    "INSERT INTO dedup (queue, id, expires_at) SELECT ?1, value, ?2 FROM json_each(?3) WHERE true "
    "ON CONFLICT (queue, id) DO UPDATE SET expires_at = excluded.expires_at WHERE dedup.expires_at <= ?4 "
    "RETURNING id"
)
SQL_PURGE_DEDUP: Final = (
    "DELETE FROM dedup WHERE (queue, id) IN "
    "(SELECT queue, id FROM dedup INDEXED BY dedup_expiry WHERE expires_at <= ? LIMIT ?)"
)
SQL_DELETE_QUEUE_DEDUP: Final = "DELETE FROM dedup WHERE queue = ?"

SQL_PROBE: Final = "INSERT INTO probe (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1"

SQL_PARTITION_KEY: Final = "SELECT key FROM partitions WHERE queue = ? AND number = ?"
SQL_INSERT_PARTITION: Final = "INSERT INTO partitions (queue, number) VALUES (?, ?)"
SQL_LAST_ID: Final = "SELECT last_id FROM partitions WHERE key = ?"
SQL_RAISE_LAST_ID: Final = "UPDATE partitions SET last_id = ?1 WHERE key = ?2 AND last_id < ?1"
SQL_DELETE_PARTITION_ITEMS: Final = (
    "DELETE FROM items WHERE part IN (SELECT key FROM partitions WHERE queue = ? AND number < ?)"
)
SQL_DELETE_PARTITIONS: Final = "DELETE FROM partitions WHERE queue = ? AND number < ?"
SQL_PARTITION_QUEUES: Final = "SELECT DISTINCT queue FROM partitions ORDER BY queue"

# Moving partitions between the databases of a node's processes (_move.py): a batch at a time, copied by
# primary key into the owner's database (a batch copied again after a crash is ignored there), deleted
# from the source once that copy committed.
SQL_PARTITIONS: Final = "SELECT key, queue, number FROM partitions ORDER BY queue, number"
SQL_DELETE_PARTITION: Final = "DELETE FROM partitions WHERE key = ?"
SQL_DROP_PARTITION_ITEMS: Final = "DELETE FROM items WHERE part = ?"
SQL_ITEM_BATCH: Final = f"SELECT {_COLUMNS} FROM items WHERE part = ? ORDER BY id LIMIT ?"
SQL_COPY_ITEM: Final = f"INSERT OR IGNORE INTO items (part, {_COLUMNS}) VALUES ({_ITEM_VALUES})"
SQL_NEXT_DEDUP_QUEUE: Final = "SELECT queue FROM dedup WHERE queue > ? ORDER BY queue LIMIT 1"
SQL_DEDUP_BATCH: Final = "SELECT id, expires_at FROM dedup WHERE queue = ? ORDER BY id LIMIT ?"
SQL_COPY_DEDUP: Final = (
    "INSERT INTO dedup (queue, id, expires_at) VALUES (?, ?, ?) "
    "ON CONFLICT (queue, id) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)"
)
SQL_DELETE_DEDUP: Final = "DELETE FROM dedup WHERE queue = ? AND id IN (SELECT value FROM json_each(?))"
SQL_HOLDS_PARTITIONS: Final = (
    "SELECT 1 FROM partitions UNION ALL SELECT 1 FROM items UNION ALL SELECT 1 FROM dedup LIMIT 1"
)

_QUEUE_COLUMNS = (
    "name, namespace, lease_timeout, expire_timeout, dead_queue, max_attempts, reference, "
    "requested_partitions, created_at, updated_at, extra, dedup_window"
)
SQL_GET_QUEUE: Final = f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE name = ?"
_QUEUE_VALUES = ", ".join("?" * 12)
SQL_ADD_QUEUE: Final = (
    f"INSERT INTO queues ({_QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES}) ON CONFLICT (name) DO NOTHING"
)
SQL_PUT_QUEUE: Final = f"INSERT OR REPLACE INTO queues ({_QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES})"
SQL_DELETE_QUEUE: Final = "DELETE FROM queues WHERE name = ?"
SQL_LIST_QUEUES: Final = (
    f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE namespace = ? AND name >= ? ORDER BY name LIMIT ?"
)
