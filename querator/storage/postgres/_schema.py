"""The tables, their version, and creating or migrating them when a store opens.

Every string is a ``BYTEA`` of its UTF-8 (``_pool`` dumps every ``str`` so): PostgreSQL's ``TEXT`` cannot
hold NUL, which a client's name, reference or id may carry, and bytes sort in byte order, which ids need
(KSUIDs mix upper and lower case, which a linguistic collation sorts differently) and which is code point
order for record keys, whatever collation the database was created with.
"""

from __future__ import annotations

from typing import Final

from querator.storage.base import DEFAULT_DEDUP_WINDOW

SCHEMA_VERSION: Final = 1
"""The version of the tables below, kept in ``querator_schema``; a newer one is refused."""

LOCK_KEY: Final = 0x71756572
"""The advisory lock that serialises nodes creating or migrating one schema at the same time."""

_T: Final = "BYTEA NOT NULL"

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS querator_schema (version INTEGER NOT NULL)",
    f"""CREATE TABLE IF NOT EXISTS queues (
        name {_T} PRIMARY KEY,
        namespace {_T},
        lease_timeout BIGINT NOT NULL,
        expire_timeout BIGINT NOT NULL,
        dead_queue BYTEA NOT NULL,
        max_attempts BIGINT NOT NULL,
        reference BYTEA NOT NULL,
        requested_partitions BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        extra BYTEA NOT NULL,
        dedup_window BIGINT NOT NULL DEFAULT {DEFAULT_DEDUP_WINDOW}
    )""",
    "CREATE INDEX IF NOT EXISTS queues_by_namespace ON queues (namespace, name)",
    # One row per partition: its greatest id (new ids stay above it) and its owner epoch, the fence.
    f"""CREATE TABLE IF NOT EXISTS partitions (
        queue {_T},
        number INTEGER NOT NULL,
        last_id {_T} DEFAULT ''::bytea,
        epoch BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (queue, number)
    )""",
    # A partition is one contiguous range of the primary key, in id (FIFO) order. Partial indexes make
    # every PartitionTx primitive an index range scan.
    f"""CREATE TABLE IF NOT EXISTS items (
        queue {_T},
        part INTEGER NOT NULL,
        id {_T},
        source_id {_T},
        is_leased BOOLEAN NOT NULL,
        lease_deadline BIGINT NOT NULL,
        expire_deadline BIGINT NOT NULL,
        enqueue_at BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        max_attempts BIGINT NOT NULL,
        reference BYTEA NOT NULL,
        encoding BYTEA NOT NULL,
        kind BYTEA NOT NULL,
        payload BYTEA NOT NULL,
        job_id BYTEA NOT NULL,
        failures BYTEA NOT NULL,
        PRIMARY KEY (queue, part, id)
    ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02)""",
    """CREATE INDEX IF NOT EXISTS items_queued ON items (queue, part, id)
        WHERE NOT is_leased AND enqueue_at = 0""",
    # Equal deadlines come back in id order (FIFO), as in the other stores, whose indexes end with the
    # key: a PostgreSQL index would break ties by the rows' places in the heap.
    """CREATE INDEX IF NOT EXISTS items_leased ON items (queue, part, lease_deadline, id)
        WHERE is_leased AND enqueue_at = 0""",
    """CREATE INDEX IF NOT EXISTS items_expiring ON items (queue, part, expire_deadline, id)
        WHERE enqueue_at = 0 AND expire_deadline > 0""",
    "CREATE INDEX IF NOT EXISTS items_scheduled_at ON items (queue, part, enqueue_at) WHERE enqueue_at > 0",
    "CREATE INDEX IF NOT EXISTS items_scheduled ON items (queue, part, id) WHERE enqueue_at > 0",
    "CREATE INDEX IF NOT EXISTS items_source ON items (queue, part, source_id) WHERE source_id <> ''",
    f"""CREATE TABLE IF NOT EXISTS dedup (
        queue {_T},
        id {_T},
        expires_at BIGINT NOT NULL,
        PRIMARY KEY (queue, id)
    )""",
    "CREATE INDEX IF NOT EXISTS dedup_expiry ON dedup (expires_at)",
    f"""CREATE TABLE IF NOT EXISTS schedules (
        name {_T} PRIMARY KEY,
        cron BYTEA NOT NULL,
        time_zone BYTEA NOT NULL,
        queue BYTEA NOT NULL,
        catch_up BYTEA NOT NULL,
        catch_up_limit BIGINT NOT NULL,
        jitter BIGINT NOT NULL,
        paused BOOLEAN NOT NULL,
        start BIGINT NOT NULL,
        last_tick BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        encoding BYTEA NOT NULL,
        kind BYTEA NOT NULL,
        reference BYTEA NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        slot INTEGER NOT NULL
    )""",
    # A member reads only its slots' schedules (docs/adr/0041), and learns of a change by a slot's version.
    "CREATE INDEX IF NOT EXISTS schedules_by_slot ON schedules (slot, name)",
    "CREATE TABLE IF NOT EXISTS schedule_slots (slot INTEGER PRIMARY KEY, version BIGINT NOT NULL)",
    # A workflow's record is msgpack of storage.workflows.Workflow; the columns beside it are what lists
    # and purges filter on.
    f"""CREATE TABLE IF NOT EXISTS workflows (
        id {_T} PRIMARY KEY,
        status {_T},
        version BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        record BYTEA NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS workflows_by_status ON workflows (status, id)",
    "CREATE INDEX IF NOT EXISTS workflows_expiring ON workflows (expires_at) WHERE expires_at > 0",
    f"""CREATE TABLE IF NOT EXISTS records (
        kind {_T},
        key {_T},
        value BYTEA NOT NULL,
        PRIMARY KEY (kind, key)
    )""",
    # Stamps (docs/adr/0041): a time per key, raised by every member without a read, apart from records.
    f"""CREATE TABLE IF NOT EXISTS stamps (
        kind {_T},
        key {_T},
        at BIGINT NOT NULL,
        PRIMARY KEY (kind, key)
    )""",
    # The fence (docs/adr/0045), the last statement of every run. For a run that only read (``newest``
    # NULL) it checks that the caller's epoch still owns the partition; for a run that wrote it does so
    # under the row's lock, which orders it against a claim: a claim committed first makes it fail.
    # Failing rolls the whole run back. A run that inserted raises the partition's last_id to its
    # greatest new id; one that did not (``newest`` empty: leases, completes) only share-locks the row,
    # which leaves no dead row version behind (docs/adr/0054).
    """CREATE OR REPLACE FUNCTION querator_fence(q BYTEA, n BIGINT, mine BIGINT, newest BYTEA)
    RETURNS VOID LANGUAGE plpgsql AS $$
    DECLARE
        owner BIGINT;
    BEGIN
        IF newest IS NULL THEN
            SELECT epoch INTO owner FROM partitions WHERE queue = q AND number = n;
        ELSIF newest = ''::bytea THEN
            SELECT epoch INTO owner FROM partitions WHERE queue = q AND number = n FOR SHARE;
        ELSE
            UPDATE partitions SET last_id = greatest(last_id, newest)
                WHERE queue = q AND number = n AND epoch = mine;
            IF FOUND THEN
                RETURN;
            END IF;
            SELECT epoch INTO owner FROM partitions WHERE queue = q AND number = n;
        END IF;
        IF owner = mine THEN
            RETURN;
        END IF;
        IF owner IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'QR002',
                MESSAGE = 'has no row (its queue was deleted)';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'QR001',
            MESSAGE = format('is owned by epoch %s, not %s', owner, mine);
    END $$""",
)
"""Version 1, created by ``IF NOT EXISTS`` (and the fence by ``OR REPLACE``) on every open."""

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {}
"""Statements that bring a schema from the previous version to each version above 1."""
