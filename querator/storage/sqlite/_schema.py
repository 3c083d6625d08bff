"""The database's tables, the version of their layout, and the pragmas a connection is opened with."""

from __future__ import annotations

from typing import Final

from querator.storage.base import DEFAULT_DEDUP_WINDOW
from querator.storage.sqlite._records import STAMPS_TABLE
from querator.storage.sqlite._schedules import SLOT_TABLES
from querator.storage.sqlite._schedules import TABLE as SCHEDULES_TABLE

SCHEMA_VERSION: Final = 3
"""``PRAGMA user_version`` of the schema below; a database written by a newer version is refused."""

PAGE_SIZE: Final = 8192
"""Page size of a new database. Items are rows of a ``WITHOUT ROWID`` b-tree, which keeps up to about a
quarter of a page inline: 8 KiB pages hold a 1-2 KiB item without an overflow page (4 KiB pages would
spend a whole overflow page on the last few bytes of a 1 KiB item)."""
CACHE_SIZE_KIB: Final = 32 * 1024
MMAP_SIZE: Final = 256 * 1024 * 1024
JOURNAL_SIZE_LIMIT: Final = 64 * 1024 * 1024
"""Bytes the WAL file is truncated back to after a checkpoint."""
MIN_SQLITE: Final = (3, 35, 0)
"""The oldest sqlite library this backend runs on: the dedup upsert needs ``RETURNING``."""
BUSY_TIMEOUT_MS: Final = 5000
"""How long a transaction waits for a lock held by another process (none is expected)."""

SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS queues (
        name TEXT NOT NULL PRIMARY KEY,
        namespace TEXT NOT NULL,
        lease_timeout INTEGER NOT NULL,
        expire_timeout INTEGER NOT NULL,
        dead_queue TEXT NOT NULL,
        max_attempts INTEGER NOT NULL,
        reference TEXT NOT NULL,
        requested_partitions INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        extra TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS queues_by_namespace ON queues (namespace, name)",
    """CREATE TABLE IF NOT EXISTS partitions (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        number INTEGER NOT NULL,
        last_id TEXT NOT NULL DEFAULT '',
        UNIQUE (queue, number)
    )""",
    """CREATE TABLE IF NOT EXISTS items (
        part INTEGER NOT NULL,
        id TEXT NOT NULL,
        source_id TEXT NOT NULL,
        is_leased INTEGER NOT NULL,
        lease_deadline INTEGER NOT NULL,
        expire_deadline INTEGER NOT NULL,
        enqueue_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL,
        max_attempts INTEGER NOT NULL,
        reference TEXT NOT NULL,
        encoding TEXT NOT NULL,
        kind TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (part, id)
    ) WITHOUT ROWID""",
    # The queries below repeat each index's WHERE terms literally: sqlite only uses a partial index when
    # the query's WHERE clause contains the same terms.
    "CREATE INDEX IF NOT EXISTS items_queued ON items (part, id) WHERE is_leased = 0 AND enqueue_at = 0",
    """CREATE INDEX IF NOT EXISTS items_leased ON items (part, lease_deadline)
        WHERE is_leased = 1 AND enqueue_at = 0""",
    """CREATE INDEX IF NOT EXISTS items_expiring ON items (part, expire_deadline)
        WHERE enqueue_at = 0 AND expire_deadline > 0""",
    "CREATE INDEX IF NOT EXISTS items_scheduled_at ON items (part, enqueue_at) WHERE enqueue_at > 0",
    "CREATE INDEX IF NOT EXISTS items_scheduled ON items (part, id) WHERE enqueue_at > 0",
    "CREATE INDEX IF NOT EXISTS items_source ON items (part, source_id) WHERE source_id <> ''",
    # One row the readiness check rewrites after a write found the disk full, to see whether there is room
    # again. Created by every version since (IF NOT EXISTS), so it needs no migration: a database that has
    # it still opens in a version that does not.
    "CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
    # Cron schedules (docs/schedules.md), created the same way: no migration.
    SCHEDULES_TABLE,
    *SLOT_TABLES,
    # Durable workflows (_workflows.py), also created by every version since with IF NOT EXISTS: a record
    # is msgpack of storage.workflows.Workflow; the columns beside it are what lists and purges filter on.
    """CREATE TABLE IF NOT EXISTS workflows (
        id TEXT NOT NULL PRIMARY KEY,
        status TEXT NOT NULL,
        version INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        record BLOB NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS workflows_by_status ON workflows (status, id)",
    "CREATE INDEX IF NOT EXISTS workflows_expiring ON workflows (expires_at) WHERE expires_at > 0",
    # A journal's rows (docs/adr/0046): msgpack of storage.workflows.Entry, written with the record.
    """CREATE TABLE IF NOT EXISTS workflow_entries (
        id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        version INTEGER NOT NULL,
        entry BLOB NOT NULL,
        PRIMARY KEY (id, seq)
    ) WITHOUT ROWID""",
    # Tenancy's records (docs/tenancy.md): like probe, created by IF NOT EXISTS, so no migration.
    """CREATE TABLE IF NOT EXISTS records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (kind, key)
    ) WITHOUT ROWID""",
    STAMPS_TABLE,
)

MIGRATIONS: Final = {
    # Version 2: produce de-duplication (extensions.md).
    2: (
        f"ALTER TABLE queues ADD COLUMN dedup_window INTEGER NOT NULL DEFAULT {DEFAULT_DEDUP_WINDOW}",
        """CREATE TABLE dedup (
            queue TEXT NOT NULL,
            id TEXT NOT NULL,
            expires_at INTEGER NOT NULL,
            PRIMARY KEY (queue, id)
        ) WITHOUT ROWID""",
        "CREATE INDEX dedup_expiry ON dedup (expires_at)",
    ),
    # Version 3: an item's job and failures (storage/failures.py).
    3: (
        "ALTER TABLE items ADD COLUMN job_id TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE items ADD COLUMN failures BLOB NOT NULL DEFAULT x''",
    ),
}
"""Statements that bring a database from the previous version to each version; ``SCHEMA`` is version 1."""
