"""Every SQL statement the store runs on the items and queues of ``_schema`` (``%s`` placeholders).

A batch travels as arrays, one per column (``unnest``), so that a run's insert, update or delete of a
hundred items is one statement with one plan, not a hundred.
"""

from __future__ import annotations

from typing import Final

ITEM_COLUMNS: Final = (
    "id, source_id, is_leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, "
    "max_attempts, reference, encoding, kind, payload, job_id, failures"
)
"""Item columns in the order of ``Item``'s fields."""
_ITEM_ARRAYS: Final = (
    "%s::text[], %s::text[], %s::bool[], %s::int8[], %s::int8[], %s::int8[], %s::int8[], %s::int8[], "
    "%s::int8[], %s::text[], %s::text[], %s::text[], %s::bytea[], %s::text[], %s::bytea[]"
)
_PART: Final = "queue = %s AND part = %s"

INSERT_ITEMS: Final = (
    f"INSERT INTO items (queue, part, {ITEM_COLUMNS}) SELECT %s, %s, * FROM unnest({_ITEM_ARRAYS})"
)
# Only the lease and schedule fields change while an item keeps its id (see PartitionTx.update).
UPDATE_ITEMS: Final = (
    "UPDATE items SET is_leased = u.l, lease_deadline = u.ld, attempts = u.a, enqueue_at = u.e, "
    "expire_deadline = u.x, failures = u.f "
    "FROM unnest(%s::text[], %s::bool[], %s::int8[], %s::int8[], %s::int8[], %s::int8[], %s::bytea[]) "
    "AS u(id, l, ld, a, e, x, f) WHERE items.queue = %s AND items.part = %s AND items.id = u.id"
)
DELETE_ITEMS: Final = f"DELETE FROM items WHERE {_PART} AND id = ANY(%s::text[])"
GET_ITEMS: Final = f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND id = ANY(%s::text[])"
# Each query repeats its partial index's WHERE terms, so that the planner can use it.
HEAD: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND NOT is_leased AND enqueue_at = 0 "
    "ORDER BY id LIMIT %s"
)
SOURCES: Final = (
    f"SELECT DISTINCT source_id FROM items WHERE {_PART} AND source_id <> '' AND source_id = ANY(%s::text[])"
)
EXPIRED_LEASES: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND is_leased AND enqueue_at = 0 "
    "AND lease_deadline < %s ORDER BY lease_deadline LIMIT %s"
)
EXPIRED: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at = 0 AND expire_deadline > 0 "
    "AND expire_deadline < %s ORDER BY expire_deadline LIMIT %s"
)
# Due items come back in id order but are found through enqueue_at: few of many scheduled items are due.
DUE: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at > 0 AND enqueue_at < %s "
    "ORDER BY id LIMIT %s"
)
DEADLINES: Final = (
    "SELECT "
    "coalesce((SELECT lease_deadline FROM items WHERE queue = %(q)s AND part = %(p)s AND is_leased "
    "AND enqueue_at = 0 ORDER BY lease_deadline LIMIT 1), 0), "
    "coalesce((SELECT expire_deadline FROM items WHERE queue = %(q)s AND part = %(p)s AND enqueue_at = 0 "
    "AND expire_deadline > 0 ORDER BY expire_deadline LIMIT 1), 0), "
    "coalesce((SELECT enqueue_at FROM items WHERE queue = %(q)s AND part = %(p)s AND enqueue_at > 0 "
    "ORDER BY enqueue_at LIMIT 1), 0)"
)
LIST: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at = 0 AND id >= %s ORDER BY id LIMIT %s"
)
LIST_SCHEDULED: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at > 0 AND id >= %s ORDER BY id LIMIT %s"
)
STATS: Final = (
    "SELECT "
    "count(*) FILTER (WHERE enqueue_at = 0), "
    "coalesce(sum(%(now)s - created_at) FILTER (WHERE enqueue_at = 0), 0), "
    "count(*) FILTER (WHERE enqueue_at = 0 AND is_leased), "
    "coalesce(sum(lease_deadline - %(now)s) FILTER (WHERE enqueue_at = 0 AND is_leased), 0), "
    "count(*) FILTER (WHERE enqueue_at > 0) "
    "FROM items WHERE queue = %(q)s AND part = %(p)s"
)
CLEAR_QUEUED: Final = f"DELETE FROM items WHERE {_PART} AND NOT is_leased AND enqueue_at = 0"
CLEAR_UNSCHEDULED: Final = f"DELETE FROM items WHERE {_PART} AND enqueue_at = 0"
CLEAR_SCHEDULED: Final = f"DELETE FROM items WHERE {_PART} AND enqueue_at > 0"

# Records every id of the batch at once and returns those recorded now; the others were seen within the
# window. An expired record is taken over: its window starts again from now. A concurrent produce of
# the same id on another partition waits for this transaction and then finds the record.
DEDUP: Final = (
    "INSERT INTO dedup (queue, id, expires_at) SELECT %(q)s, unnest(%(ids)s::text[]), %(until)s "
    "ON CONFLICT (queue, id) DO UPDATE SET expires_at = excluded.expires_at "
    "WHERE dedup.expires_at <= %(now)s RETURNING id"
)
PURGE_DEDUP: Final = (
    "DELETE FROM dedup WHERE (queue, id) IN "
    "(SELECT queue, id FROM dedup WHERE expires_at <= %s ORDER BY expires_at LIMIT %s)"
)
DELETE_QUEUE_DEDUP: Final = "DELETE FROM dedup WHERE queue = %s"

LAST_ID: Final = "SELECT last_id FROM partitions WHERE queue = %s AND number = %s"
FENCE: Final = "SELECT querator_fence(%s, %s, %s, %s)"
# A node alone claims with its start time, and fails if it finds a newer epoch (no row returned).
CLAIM: Final = (
    "INSERT INTO partitions (queue, number, epoch) VALUES (%s, %s, %s) ON CONFLICT (queue, number) "
    "DO UPDATE SET epoch = excluded.epoch WHERE partitions.epoch <= excluded.epoch RETURNING epoch"
)
# A takeover goes above every epoch it finds, under the row's lock: two takeovers never share one.
TAKE_OVER: Final = (
    "INSERT INTO partitions (queue, number, epoch) VALUES (%s, %s, %s) ON CONFLICT (queue, number) "
    "DO UPDATE SET epoch = greatest(partitions.epoch + 1, excluded.epoch) RETURNING epoch"
)
CURRENT_EPOCH: Final = "SELECT epoch FROM partitions WHERE queue = %s AND number = %s"
DELETE_PARTITION_ITEMS: Final = "DELETE FROM items WHERE queue = %s AND part < %s"
DELETE_PARTITIONS: Final = "DELETE FROM partitions WHERE queue = %s AND number < %s"
PARTITION_QUEUES: Final = "SELECT DISTINCT queue FROM partitions ORDER BY queue"

QUEUE_COLUMNS: Final = (
    "name, namespace, lease_timeout, expire_timeout, dead_queue, max_attempts, reference, "
    "requested_partitions, created_at, updated_at, extra, dedup_window"
)
_QUEUE_VALUES: Final = ", ".join(["%s"] * 12)
GET_QUEUE: Final = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = %s"
ADD_QUEUE: Final = (
    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES}) ON CONFLICT (name) DO NOTHING"
)
PUT_QUEUE: Final = (
    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES}) ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in QUEUE_COLUMNS.split(", ")[1:])
)
DELETE_QUEUE: Final = "DELETE FROM queues WHERE name = %s"
LIST_QUEUES: Final = (
    f"SELECT {QUEUE_COLUMNS} FROM queues WHERE namespace = %s AND name >= %s ORDER BY name LIMIT %s"
)
