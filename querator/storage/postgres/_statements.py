"""Every SQL statement the store runs on the items and queues of ``_schema`` (``%b`` placeholders).

Parameters are binary (``%b``): a ``str`` goes as the ``BYTEA`` of its UTF-8 (``_schema``). A batch
travels as arrays, one per column (``unnest``), so that a run's insert, update or delete of a
hundred items is one statement with one plan, not a hundred.
"""

from __future__ import annotations

from functools import cache
from typing import Final

ITEM_COLUMNS: Final = (
    "id, source_id, is_leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, "
    "max_attempts, reference, encoding, kind, payload, job_id, failures"
)
"""Item columns in the order of ``Item``'s fields."""
_ITEM_ARRAYS: Final = (
    "%b::bytea[], %b::bytea[], %b::bool[], %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::int8[], "
    "%b::int8[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[]"
)
_PART: Final = "queue = %b AND part = %b"

INSERT_ITEMS: Final = (
    f"INSERT INTO items (queue, part, {ITEM_COLUMNS}) SELECT %b, %b, * FROM unnest({_ITEM_ARRAYS})"
)
# Only the lease and schedule fields change while an item keeps its id (see PartitionTx.update).
UPDATE_ITEMS: Final = (
    "UPDATE items SET is_leased = u.l, lease_deadline = u.ld, attempts = u.a, enqueue_at = u.e, "
    "expire_deadline = u.x, failures = u.f "
    "FROM unnest(%b::bytea[], %b::bool[], %b::int8[], %b::int8[], %b::int8[], %b::int8[], %b::bytea[]) "
    "AS u(id, l, ld, a, e, x, f) WHERE items.queue = %b AND items.part = %b AND items.id = u.id"
)
DELETE_ITEMS: Final = f"DELETE FROM items WHERE {_PART} AND id = ANY(%b::bytea[])"
GET_ITEMS: Final = f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND id = ANY(%b::bytea[])"
# Each query repeats its partial index's WHERE terms, so that the planner can use it.
# From the partition's head bound (``_tx.PostgresTx.head``): the index entries of items leased since the
# last vacuum lie below it, and the scan starts past them.
HEAD: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND NOT is_leased AND enqueue_at = 0 AND id >= %b "
    "ORDER BY id LIMIT %b"
)
SOURCES: Final = (
    f"SELECT DISTINCT source_id FROM items WHERE {_PART} AND source_id <> '' AND source_id = ANY(%b::bytea[])"
)
EXPIRED_LEASES: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND is_leased AND enqueue_at = 0 "
    "AND lease_deadline < %b ORDER BY lease_deadline, id LIMIT %b"
)
EXPIRED: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at = 0 AND expire_deadline > 0 "
    "AND expire_deadline < %b ORDER BY expire_deadline, id LIMIT %b"
)
# Due items come back in id order but are found through enqueue_at: few of many scheduled items are due.
DUE: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at > 0 AND enqueue_at < %b "
    "ORDER BY id LIMIT %b"
)
DEADLINES: Final = (
    "SELECT "
    "coalesce((SELECT lease_deadline FROM items WHERE queue = %(q)b AND part = %(p)b AND is_leased "
    "AND enqueue_at = 0 ORDER BY lease_deadline LIMIT 1), 0), "
    "coalesce((SELECT expire_deadline FROM items WHERE queue = %(q)b AND part = %(p)b AND enqueue_at = 0 "
    "AND expire_deadline > 0 ORDER BY expire_deadline LIMIT 1), 0), "
    "coalesce((SELECT enqueue_at FROM items WHERE queue = %(q)b AND part = %(p)b AND enqueue_at > 0 "
    "ORDER BY enqueue_at LIMIT 1), 0)"
)
LIST: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at = 0 AND id >= %b ORDER BY id LIMIT %b"
)
LIST_SCHEDULED: Final = (
    f"SELECT {ITEM_COLUMNS} FROM items WHERE {_PART} AND enqueue_at > 0 AND id >= %b ORDER BY id LIMIT %b"
)
STATS: Final = (
    "SELECT "
    "count(*) FILTER (WHERE enqueue_at = 0), "
    "coalesce(sum(%(now)b - created_at) FILTER (WHERE enqueue_at = 0), 0), "
    "count(*) FILTER (WHERE enqueue_at = 0 AND is_leased), "
    "coalesce(sum(lease_deadline - %(now)b) FILTER (WHERE enqueue_at = 0 AND is_leased), 0), "
    "count(*) FILTER (WHERE enqueue_at > 0) "
    "FROM items WHERE queue = %(q)b AND part = %(p)b"
)
CLEAR_QUEUED: Final = f"DELETE FROM items WHERE {_PART} AND NOT is_leased AND enqueue_at = 0"
CLEAR_UNSCHEDULED: Final = f"DELETE FROM items WHERE {_PART} AND enqueue_at = 0"
CLEAR_SCHEDULED: Final = f"DELETE FROM items WHERE {_PART} AND enqueue_at > 0"

# Records every id of the batch at once and returns those recorded now; the others were seen within the
# window. An expired record is taken over: its window starts again from now. A concurrent produce of
# the same id on another partition waits for this transaction and then finds the record.
DEDUP: Final = (
    "INSERT INTO dedup (queue, id, expires_at) SELECT %(q)b, unnest(%(ids)b::bytea[]), %(until)b "
    "ON CONFLICT (queue, id) DO UPDATE SET expires_at = excluded.expires_at "
    "WHERE dedup.expires_at <= %(now)b RETURNING id"
)
PURGE_DEDUP: Final = (
    "DELETE FROM dedup WHERE (queue, id) IN "
    "(SELECT queue, id FROM dedup WHERE expires_at <= %b ORDER BY expires_at LIMIT %b)"
)
DELETE_QUEUE_DEDUP: Final = "DELETE FROM dedup WHERE queue = %b"

LAST_ID: Final = "SELECT last_id FROM partitions WHERE queue = %b AND number = %b"
FENCE: Final = "SELECT querator_fence(%b, %b, %b, %b)"


@cache
def fenced(write: str) -> str:
    """``write`` (of the items) and the fence as one statement: the write's parameters, then the fence's.
    A failing fence aborts the statement, and with it the run's transaction (docs/adr/0073). The fence
    reads the write's count, so the write runs first: PostgreSQL runs a data-modifying ``WITH`` that the
    query does not read after the query, and the fence would lock the partition's row before the
    write locked its items, the order a queue's delete and runs of more writes take the other way."""
    return f"WITH w AS ({write} RETURNING 1) {FENCE} FROM (SELECT count(*) FROM w) AS written"


# A node alone claims with its start time, and fails if it finds a newer epoch (no row returned).
CLAIM: Final = (
    "INSERT INTO partitions (queue, number, epoch) VALUES (%b, %b, %b) ON CONFLICT (queue, number) "
    "DO UPDATE SET epoch = excluded.epoch WHERE partitions.epoch <= excluded.epoch RETURNING epoch"
)
# A takeover goes above every epoch it finds, under the row's lock: two takeovers never share one.
TAKE_OVER: Final = (
    "INSERT INTO partitions (queue, number, epoch) VALUES (%b, %b, %b) ON CONFLICT (queue, number) "
    "DO UPDATE SET epoch = greatest(partitions.epoch + 1, excluded.epoch) RETURNING epoch"
)
CURRENT_EPOCH: Final = "SELECT epoch FROM partitions WHERE queue = %b AND number = %b"
DELETE_PARTITION_ITEMS: Final = "DELETE FROM items WHERE queue = %b AND part < %b"
DELETE_PARTITIONS: Final = "DELETE FROM partitions WHERE queue = %b AND number < %b"
PARTITION_QUEUES: Final = "SELECT DISTINCT queue FROM partitions ORDER BY queue"

QUEUE_COLUMNS: Final = (
    "name, namespace, lease_timeout, expire_timeout, dead_queue, max_attempts, reference, "
    "requested_partitions, created_at, updated_at, extra, dedup_window"
)
_QUEUE_VALUES: Final = ", ".join(["%b"] * 12)
GET_QUEUE: Final = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE name = %b"
ADD_QUEUE: Final = (
    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES}) ON CONFLICT (name) DO NOTHING"
)
PUT_QUEUE: Final = (
    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES ({_QUEUE_VALUES}) ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in QUEUE_COLUMNS.split(", ")[1:])
)
DELETE_QUEUE: Final = "DELETE FROM queues WHERE name = %b"
LIST_QUEUES: Final = (
    f"SELECT {QUEUE_COLUMNS} FROM queues WHERE namespace = %b AND name >= %b ORDER BY name LIMIT %b"
)
