"""The sqlite backend: every queue of one server in one stdlib-sqlite3 database file in WAL mode.

One dedicated writer thread owns the connection (the aiosqlite mechanism): coroutines put jobs on a queue,
the thread runs them and hands each result back to the job's event loop with ``call_soon_threadsafe``.
``Partition.run(fn)`` is one job, and a job is one transaction, so a caller sees a result only after its
COMMIT returned: with ``synchronous=FULL`` a 200 on produce means the items are on disk.

Group commit: every commit pays an fsync, so when several jobs are waiting the thread runs them in one
transaction, each inside its own SAVEPOINT (a failing job rolls back only itself), and commits once. A
job's caller still hears nothing until that COMMIT succeeded; if it fails, every job of the group fails.

Layout: ``queues`` holds the queue records, ``partitions`` maps (queue, number) to a small integer key
and remembers the partition's greatest id, and one ``items`` table holds every item keyed by (partition
key, id) ``WITHOUT ROWID``, so a partition is one contiguous key range in id (FIFO) order. Partial
indexes make every ``PartitionTx`` primitive an index range scan, and nothing ever reads a whole
partition into memory: reads are ``LIMIT``-ed and ``stats`` is one aggregate query.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec

from querator.errors import StorageError
from querator.storage.base import (
    DEFAULT_DEDUP_WINDOW,
    ClearOptions,
    Deadlines,
    Item,
    Partition,
    PartitionStats,
    PartitionTx,
    QueueRecord,
    list_page,
)

__all__ = ["SqliteStorageError", "SqliteStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION: Final = 2
"""``PRAGMA user_version`` of the schema below; a database written by a newer version is refused."""

MAX_GROUP: Final = 64
"""Most jobs the writer thread commits together."""

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
PURGE_LIMIT: Final = 10_000
"""Most expired de-duplication records one purge transaction deletes."""
BUSY_TIMEOUT_MS: Final = 5000
"""How long a transaction waits for a lock held by another process (none is expected)."""

INITIALISED_SUFFIX: Final = ".initialised"
"""The marker file next to the database (``querator.db.initialised``), written once the database's schema
was first committed: from then on a missing or empty database is damage, never a new store to create.
A database without the marker (a new data dir, or one written before the marker existed) is checked
like any other, and gets it."""
MAX_PROBLEMS: Final = 100
"""Most problems ``PRAGMA quick_check`` looks for before the start-up refusal (it shows the first)."""

_SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA", "0", "1", "2", "3"})

# --- schema -------------------------------------------------------------------------------------------

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
}
"""Statements that bring a database from the previous version to each version; ``SCHEMA`` is version 1."""

# --- statements ---------------------------------------------------------------------------------------

_COLUMNS = (
    "id, source_id, is_leased, lease_deadline, expire_deadline, enqueue_at, created_at, attempts, "
    "max_attempts, reference, encoding, kind, payload"
)
"""Item columns in the order of ``Item``'s fields."""

SQL_INSERT_ITEM: Final = f"INSERT INTO items (part, {_COLUMNS}) VALUES ({', '.join('?' * 14)})"
# Only the lease and schedule fields change while an item keeps its id (see PartitionTx.update).
SQL_UPDATE_ITEM: Final = (
    "UPDATE items SET is_leased = ?, lease_deadline = ?, attempts = ?, enqueue_at = ? "
    "WHERE part = ? AND id = ?"
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

_EXTRA_ENCODER = msgspec.json.Encoder()
_IDS_ENCODER = msgspec.json.Encoder()
_EXTRA_DECODER = msgspec.json.Decoder(dict[str, str])


class SqliteStorageError(StorageError):
    """sqlite failed; the transaction it happened in was rolled back (the driver's error is the cause)."""


def _storage_error(exc: sqlite3.Error, context: str = "") -> SqliteStorageError:
    """The one place a driver error becomes ours; ``context`` says what was being done."""
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    error = SqliteStorageError(f"sqlite storage error; {context}{': ' if context else ''}{name}: {exc}")
    error.__cause__ = exc
    return error


def _lost_error() -> SqliteStorageError:
    return SqliteStorageError(
        "sqlite storage error; the transaction was rolled back by a failure of a job committed with it"
    )


# --- rows ---------------------------------------------------------------------------------------------


def _item(row: tuple[Any, ...]) -> Item:
    item = Item(*row)
    item.is_leased = bool(item.is_leased)
    return item


def _item_row(key: int, i: Item) -> tuple[Any, ...]:
    return (
        key, i.id, i.source_id, int(i.is_leased), i.lease_deadline, i.expire_deadline, i.enqueue_at,
        i.created_at, i.attempts, i.max_attempts, i.reference, i.encoding, i.kind, i.payload,
    )  # fmt: skip


def _queue_row(r: QueueRecord) -> tuple[Any, ...]:
    return (
        r.name, r.namespace, r.lease_timeout, r.expire_timeout, r.dead_queue, r.max_attempts, r.reference,
        r.requested_partitions, r.created_at, r.updated_at, _EXTRA_ENCODER.encode(r.extra).decode(),
        r.dedup_window,
    )  # fmt: skip


def _queue(row: tuple[Any, ...]) -> QueueRecord:
    record = QueueRecord(*row[:10])
    record.extra = _EXTRA_DECODER.decode(row[10])
    record.dedup_window = row[11]
    return record


# --- the writer thread's side -------------------------------------------------------------------------


class _Worker:
    """The connection and what goes with it. Used on the writer thread only."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.keys: dict[tuple[str, int], int] = {}
        """Partition keys known to be committed (or created by the open transaction, see new_keys)."""
        self.new_keys: list[tuple[str, int]] = []
        """Partitions created by the open transaction: forgotten again if it rolls back."""

    def partition_key(self, queue_name: str, number: int) -> int:
        """The partition's key, creating its row on first use (inside the current transaction)."""
        name = (queue_name, number)
        key = self.keys.get(name)
        if key is None:
            row = self.conn.execute(SQL_PARTITION_KEY, name).fetchone()
            if row is None:
                created = self.conn.execute(SQL_INSERT_PARTITION, name).lastrowid
                assert created is not None
                key = created
                self.new_keys.append(name)
            else:
                key = int(row[0])
            self.keys[name] = key
        return key

    def forget_new_keys(self, mark: int = 0) -> None:
        """Drops the keys created since ``mark`` after their rows were rolled back."""
        for name in self.new_keys[mark:]:
            self.keys.pop(name, None)
        del self.new_keys[mark:]


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
        self._conn.executemany(SQL_INSERT_ITEM, [_item_row(key, i) for i in items])
        self._conn.execute(SQL_RAISE_LAST_ID, (max(i.id for i in items), key))

    def head(self, limit: int) -> list[Item]:
        return [_item(r) for r in self._conn.execute(SQL_HEAD, (self._key, limit))]

    def get(self, ids: Collection[str]) -> dict[str, Item]:
        rows = self._conn.execute(SQL_GET_ITEMS, (self._key, _IDS_ENCODER.encode(list(ids))))
        return {row[0]: _item(row) for row in rows}

    def update(self, items: Sequence[Item]) -> None:
        key = self._key
        self._conn.executemany(
            SQL_UPDATE_ITEM,
            [(int(i.is_leased), i.lease_deadline, i.attempts, i.enqueue_at, key, i.id) for i in items],
        )

    def delete(self, ids: Collection[str]) -> None:
        if ids:
            self._conn.execute(SQL_DELETE_ITEMS, (self._key, _IDS_ENCODER.encode(list(ids))))

    def existing_source_ids(self, source_ids: Collection[str]) -> set[str]:
        execute = self._conn.execute
        key = self._key
        return {s for s in source_ids if s and execute(SQL_SOURCE_EXISTS, (key, s)).fetchone() is not None}

    def expired_leases(self, now: int, limit: int) -> list[Item]:
        return [_item(r) for r in self._conn.execute(SQL_EXPIRED_LEASES, (self._key, now, limit))]

    def expired(self, now: int, limit: int) -> list[Item]:
        return [_item(r) for r in self._conn.execute(SQL_EXPIRED, (self._key, now, limit))]

    def due(self, now: int, limit: int) -> list[Item]:
        return [_item(r) for r in self._conn.execute(SQL_DUE, (self._key, now, limit))]

    def deadlines(self) -> Deadlines:
        lease, expire, enqueue = self._conn.execute(SQL_DEADLINES, (self._key,)).fetchone()
        return Deadlines(lease_deadline=lease, expire_deadline=expire, enqueue_at=enqueue)

    def stats(self, now: int) -> PartitionStats:
        total, age, leased, left, scheduled = self._conn.execute(SQL_STATS, (now, self._key)).fetchone()
        return PartitionStats(
            total=total,
            leased=leased,
            scheduled=scheduled,
            average_age=int(age) // total if total else 0,
            average_leased_age=int(left) // leased if leased else 0,
        )

    def dedup(self, dedup_ids: Collection[str], now: int, expires_at: int) -> set[str]:
        ids = list(dedup_ids)
        recorded = self._conn.execute(SQL_DEDUP, (self._queue, expires_at, _IDS_ENCODER.encode(ids), now))
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
        return list_page(map(_item, self._conn.execute(sql, (self._key, pivot, limit))), limit)


# --- jobs ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Job:
    """One unit of work for the writer thread and the future its caller awaits."""

    fn: Callable[[_Worker], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    stop: bool = False
    """The last job: finish what came before, close the connection, end the thread."""


_Outcome = tuple[_Job, Any, BaseException | None]


def _settle(outcomes: list[_Outcome]) -> None:
    """Runs on the event loop: resolves the futures nobody gave up on."""
    for job, value, error in outcomes:
        if job.future.done():
            continue
        if error is None:
            job.future.set_result(value)
        else:
            job.future.set_exception(error)


def _deliver(outcomes: list[_Outcome]) -> None:
    """Hands outcomes to their loops, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, batch)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


class _Writer:
    """The thread that owns the connection: runs jobs in order, grouping waiting ones into one commit."""

    def __init__(self, path: str, synchronous: str, jobs: queue.SimpleQueue[_Job]) -> None:
        self.thread = threading.Thread(target=self._main, name="querator-sqlite", daemon=True)
        self._path = path
        self._synchronous = synchronous
        self._jobs = jobs
        self._worker: _Worker | None = None
        self.ready: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.damage = ""
        """Why the database is damaged, once sqlite said so: every later job is refused (a damaged file
        must not take writes), until a restart checks the file (docs/storage.md)."""
        self.full = ""
        """Why the last write failed for want of room, until a transaction that wrote commits."""

    def _main(self) -> None:
        assert self.ready is not None and self.loop is not None
        failure: BaseException
        try:
            self._worker = _Worker(self._connect())
        except sqlite3.Error as exc:
            failure = _storage_error(exc, f"cannot open {self._path}")
        except OSError as exc:
            failure = SqliteStorageError(
                f"sqlite storage error; cannot open {self._path}: {exc.strerror or exc}"
            )
        except BaseException as exc:
            failure = exc
        else:
            _deliver([(_Job(_noop, self.ready, self.loop), None, None)])
            self._serve(self._worker)
            return
        _deliver([(_Job(_noop, self.ready, self.loop), None, failure)])

    # Long on purpose: opening a database file: each refusal (damage, a foreign file) is its own branch.
    def _connect(self) -> sqlite3.Connection:  # noqa: C901, PLR0912
        on_disk = self._path != ":memory:"
        marker = self._path + INITIALISED_SUFFIX
        existing = on_disk and os.path.exists(self._path) and os.path.getsize(self._path) > 0
        if on_disk and not existing and os.path.exists(marker):
            # sqlite would take a missing or empty file for a new database: every stored item gone.
            raise SqliteStorageError(
                f"sqlite storage error; the database {self._path} is "
                f"{'empty' if os.path.exists(self._path) else 'missing'}, but {marker} says it held a store: "
                "restore it from a backup, or remove both files to start an empty store"
            )
        if on_disk and not os.path.exists(self._path):
            # Payloads are nobody else's business: sqlite would create the file 0644, and gives its WAL
            # and shared-memory files the database file's mode.
            os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600))
        conn = sqlite3.connect(self._path, isolation_level=None, cached_statements=256)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # only takes effect on a new database
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode != "wal" and self._path != ":memory:":
                log.warning("sqlite: %s cannot use WAL mode; journal mode is %s", self._path, mode)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute(f"PRAGMA cache_size = -{CACHE_SIZE_KIB}")
            conn.execute(f"PRAGMA mmap_size = {MMAP_SIZE}")
            conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            if existing:
                self._check(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise SqliteStorageError(
                        f"sqlite storage error; schema version {version} of {self._path} is newer than "
                        f"the supported version {SCHEMA_VERSION}"
                    )
                for statement in SCHEMA:
                    conn.execute(statement)
                for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[target]:
                        conn.execute(statement)
                if version < SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if on_disk and not os.path.exists(marker):
                _write_marker(marker)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check(self, conn: sqlite3.Connection) -> None:
        """Refuses a database that fails ``PRAGMA quick_check`` (a damaged file would otherwise start,
        answer zero counts and take writes)."""
        log.debug("sqlite: checking %s (PRAGMA quick_check)", self._path)
        try:
            rows = [str(row[0]) for row in conn.execute(f"PRAGMA quick_check({MAX_PROBLEMS})")]
        except sqlite3.DatabaseError as exc:  # damage the check itself trips over
            rows = [f"{getattr(exc, 'sqlite_errorname', '')}: {exc}"]
        if rows != ["ok"]:
            # A row may hold several lines, under a "*** in database main ***" heading.
            problems = [
                line for row in rows for line in row.splitlines() if line and not line.startswith("***")
            ]
            at_least = "at least " if len(problems) >= MAX_PROBLEMS else ""
            more = f" and {at_least}{len(problems) - 1} more" if len(problems) > 1 else ""
            raise SqliteStorageError(
                f"sqlite storage error; the database {self._path} is damaged: PRAGMA quick_check found "
                f"{(problems or rows)[0]!r}{more}; restore it from a backup or repair it (sqlite3's .recover)"
            )

    def _serve(self, worker: _Worker) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            group: list[_Job] = []
            while not job.stop:
                group.append(job)
                if len(group) >= MAX_GROUP:
                    break
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    break
            if group:
                try:
                    self._run_group(worker, group)
                except BaseException as exc:  # a bug here must not leave callers waiting forever
                    log.exception("sqlite: the writer thread failed a group of jobs")
                    _deliver([(j, None, exc) for j in group])
                    self._rollback(worker)
            if job.stop:
                self._close(worker, job)
                return

    def _close(self, worker: _Worker, job: _Job) -> None:
        error: BaseException | None = None
        try:
            worker.conn.close()
        except sqlite3.Error as exc:
            error = _storage_error(exc)
        _deliver([(job, None, error)])

    def _error(self, exc: sqlite3.Error) -> SqliteStorageError:
        """A driver error as ours, noting the damage or the full disk it reports."""
        error = _storage_error(exc)
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
        if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) and not self.damage:
            self.damage = (
                f"sqlite storage error; the database {self._path} is damaged "
                f"({exc.sqlite_errorname}: {exc}): every job is refused until a restart checks it"
            )
            log.error("sqlite: %s", self.damage)
        elif code == sqlite3.SQLITE_FULL:
            self.full = error.message
        return error

    def _run_group(self, worker: _Worker, jobs: list[_Job]) -> None:
        conn = worker.conn
        # A job whose caller was cancelled before it started is not run at all.
        pending = [job for job in jobs if not job.future.cancelled()]
        if self.damage:
            refused = SqliteStorageError(self.damage)
            _deliver([(job, None, refused) for job in pending])
            return
        while pending:
            outcomes: list[_Outcome] = []
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                begin_error = self._error(exc)
                _deliver([(job, None, begin_error) for job in pending])
                return
            wrote = False  # a job that changed rows and was not rolled back: its commit needs room
            done: list[_Outcome] = []
            rest: list[_Job] = []
            for index, job in enumerate(pending):
                mark = len(worker.new_keys)
                try:
                    changes = conn.total_changes
                    conn.execute("SAVEPOINT job")
                    value = job.fn(worker)
                    conn.execute("RELEASE job")
                    wrote = wrote or conn.total_changes > changes
                except BaseException as exc:
                    error = self._error(exc) if isinstance(exc, sqlite3.Error) else exc
                    outcomes.append((job, None, error))
                    if not self._undo_job(worker, mark):
                        # The whole transaction is gone, and with it what the jobs before this one did.
                        outcomes.extend((j, None, _lost_error()) for j, _, _ in done)
                        done = []
                        rest = pending[index + 1 :]
                        break
                else:
                    done.append((job, value, None))
            else:
                done = self._commit(worker, done, wrote)
            outcomes.extend(done)
            _deliver(outcomes)
            pending = rest

    @staticmethod
    def _undo_job(worker: _Worker, mark: int) -> bool:
        """Rolls back one failed job's savepoint; False if the whole transaction had to go."""
        conn = worker.conn
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
            except sqlite3.Error:
                log.exception("sqlite: could not roll back a savepoint; rolling back the transaction")
            else:
                worker.forget_new_keys(mark)
                return True
        _Writer._rollback(worker)
        return False

    def _commit(self, worker: _Worker, done: list[_Outcome], wrote: bool) -> list[_Outcome]:
        conn = worker.conn
        try:
            conn.execute("COMMIT" if done else "ROLLBACK")
        except sqlite3.Error as exc:
            _Writer._rollback(worker)
            error = self._error(exc)
            return [(job, None, error) for job, _, _ in done]
        if done:
            worker.new_keys.clear()
            if wrote:
                self.full = ""  # there was room for this write
        else:
            worker.forget_new_keys()
        return done

    @staticmethod
    def _rollback(worker: _Worker) -> None:
        if worker.conn.in_transaction:
            try:
                worker.conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.exception("sqlite: rollback failed")
        worker.forget_new_keys()


def _noop(_: _Worker) -> None:
    return None


def _probe(worker: _Worker) -> None:
    worker.conn.execute(SQL_PROBE)


def _write_marker(path: str) -> None:
    """Writes the marker that the database next to it holds a store, durably (file and directory)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"querator: the sqlite database next to this file holds a store (docs/storage.md)\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# --- the asyncio side ---------------------------------------------------------------------------------


class SqlitePartition:
    """One partition of a queue in a ``SqliteStore``; its key is resolved on first use."""

    __slots__ = ("_number", "_queue", "_store")

    def __init__(self, store: SqliteStore, queue_name: str, number: int) -> None:
        self._store = store
        self._queue = queue_name
        self._number = number

    async def run(self, fn: Callable[[PartitionTx], T]) -> T:
        """Runs ``fn`` on the writer thread in one transaction; returns once that transaction committed.

        ``fn`` may share its transaction with other waiting jobs (group commit), each inside its own
        savepoint. A caller cancelled before the thread reached its job skips it; one cancelled later
        may find ``fn`` applied.

        Raises:
            SqliteStorageError: sqlite failed (or the store is not open); nothing of ``fn`` was applied.
            Exception: whatever ``fn`` raised, unchanged; nothing of ``fn`` was applied.
        """
        queue_name, number = self._queue, self._number

        def job(worker: _Worker) -> T:
            return fn(SqliteTx(worker.conn, worker.partition_key(queue_name, number), queue_name))

        return await self._store._submit(job)

    async def claim(self) -> None:
        """Nothing to take over: only one process opens a sqlite store (its writer thread)."""


class SqliteStore:
    """Queue records and the items of every partition in one sqlite database (WAL mode).

    Args:
        path: The database file; created with its schema when missing. ``":memory:"`` works for tests.
        synchronous: ``PRAGMA synchronous``: ``FULL`` (the default) fsyncs the WAL on every commit, so
            a committed produce survives power loss; ``NORMAL`` survives a process crash only.
    """

    def __init__(self, path: str | os.PathLike[str], synchronous: str = "FULL") -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise SqliteStorageError(
                f"sqlite storage error; sqlite {sqlite3.sqlite_version} is too old, "
                f"{'.'.join(map(str, MIN_SQLITE))} or newer is needed (RETURNING)"
            )
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of OFF, NORMAL, FULL, EXTRA; got {synchronous!r}")
        self._path = os.fspath(path)
        self._synchronous = synchronous.upper()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._writer: _Writer | None = None
        self._open = False
        self._partitions: dict[tuple[str, int], SqlitePartition] = {}

    async def open(self) -> None:
        """Starts the writer thread, connects and creates the schema; idempotent.

        Raises:
            SqliteStorageError: the database cannot be opened or has a newer schema.
        """
        writer = self._writer
        if writer is None:
            loop = asyncio.get_running_loop()
            writer = self._writer = _Writer(self._path, self._synchronous, self._jobs)
            writer.loop = loop
            writer.ready = loop.create_future()
            writer.ready.add_done_callback(self._opened)
            writer.thread.start()
        assert writer.ready is not None
        await asyncio.shield(writer.ready)

    def _opened(self, ready: asyncio.Future[None]) -> None:
        writer = self._writer
        if ready.cancelled() or ready.exception() is not None:
            if writer is not None and writer.ready is ready:  # the thread gave up and is ending
                writer.thread.join()
                self._writer = None
            return
        self._open = True

    async def close(self) -> None:
        """Finishes every job already submitted, then closes the connection and ends the thread."""
        writer = self._writer
        if writer is None:
            return
        assert writer.ready is not None
        if not writer.ready.done():  # still opening: wait, then close what was opened
            try:
                await asyncio.shield(writer.ready)
            except Exception:
                return
        if not self._open:
            return
        self._open = False
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._jobs.put(_Job(_noop, done, loop, stop=True))
        try:
            await asyncio.shield(done)
        finally:
            writer.thread.join()
            if self._writer is writer:
                self._writer = None
                self._jobs = queue.SimpleQueue()

    async def _submit(self, fn: Callable[[_Worker], T]) -> T:
        """Runs ``fn`` in a transaction on the writer thread (possibly shared with other jobs)."""
        if not self._open:
            raise SqliteStorageError("sqlite storage error; the store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(fn, future, loop))
        return await future

    async def check(self) -> None:
        """Raises once sqlite reported the database damaged, and while writes find the disk full: then it
        writes a row itself, so that the disk having room again is noticed without client traffic."""
        writer = self._writer
        if writer is not None and writer.damage:
            raise SqliteStorageError(writer.damage)
        if writer is not None and writer.full:
            await self._submit(_probe)

    def partition(self, queue: str, number: int) -> Partition:
        name = (queue, number)
        part = self._partitions.get(name)
        if part is None:
            part = self._partitions[name] = SqlitePartition(self, queue, number)
        return part

    async def delete_partitions(self, queue: str, count: int) -> None:
        def job(worker: _Worker) -> None:
            worker.conn.execute(SQL_DELETE_PARTITION_ITEMS, (queue, count))
            worker.conn.execute(SQL_DELETE_PARTITIONS, (queue, count))
            worker.conn.execute(SQL_DELETE_QUEUE_DEDUP, (queue,))
            for number in range(count):
                worker.keys.pop((queue, number), None)

        await self._submit(job)

    async def purge_dedup(self, now: int) -> int:
        def job(worker: _Worker) -> int:
            return int(worker.conn.execute(SQL_PURGE_DEDUP, (now, PURGE_LIMIT)).rowcount)

        # A bounded delete per transaction keeps the writer thread free for produces in between.
        purged = total = await self._submit(job)
        while purged == PURGE_LIMIT:
            purged = await self._submit(job)
            total += purged
        return total

    async def get_queue(self, name: str) -> QueueRecord | None:
        def job(worker: _Worker) -> QueueRecord | None:
            row = worker.conn.execute(SQL_GET_QUEUE, (name,)).fetchone()
            return _queue(row) if row else None

        return await self._submit(job)

    async def add_queue(self, record: QueueRecord) -> bool:
        row = _queue_row(record)

        def job(worker: _Worker) -> bool:
            return worker.conn.execute(SQL_ADD_QUEUE, row).rowcount == 1

        return await self._submit(job)

    async def update_queue(self, record: QueueRecord) -> None:
        row = _queue_row(record)

        def job(worker: _Worker) -> None:
            worker.conn.execute(SQL_PUT_QUEUE, row)

        await self._submit(job)

    async def delete_queue(self, name: str) -> None:
        def job(worker: _Worker) -> None:
            worker.conn.execute(SQL_DELETE_QUEUE, (name,))

        await self._submit(job)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        def job(worker: _Worker) -> list[QueueRecord]:
            return [_queue(r) for r in worker.conn.execute(SQL_LIST_QUEUES, (namespace, pivot, limit))]

        return await self._submit(job)
