"""Moving partitions between the databases of a node's processes, when their number changed
(docs/processes.md, ADR 0025).

Each process keeps its partitions in a database of its own, so a node started with another number of
processes first moves every partition into the database of the process that now owns it: its items
(leased, scheduled or queued, as they are), its greatest id (``last_id``, which new ids must stay above)
and, with its partition 0, the queue's de-duplication records. Nothing else lives with the partitions.
The partitions of a queue that has no record any more (deleted while the process holding them was down,
which drops them when it opens) are dropped rather than moved: a queue created again under its name in
the database of process 0, which drops nothing, would find them.

A crash (kill -9, power loss) at any point must lose and duplicate nothing, and the next move (to any
number) completes the work. So a batch is copied by primary key into the target and committed (fsynced:
``synchronous=FULL``) before it is deleted from the source: a batch copied again after a crash is
ignored by the target, which already has those rows. A partition's row goes last, once its items did.
Which partitions to move follows from the rows each database holds, not from what a move set out to do.
Memory stays bounded: a batch holds at most ``BATCH_ITEMS`` items or about ``BATCH_BYTES`` of payload.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from querator.storage.sqlite._codec import IDS_ENCODER
from querator.storage.sqlite._connect import INITIALISED_SUFFIX, connect
from querator.storage.sqlite._errors import SqliteStorageError, storage_error
from querator.storage.sqlite._statements import (
    SQL_COPY_DEDUP,
    SQL_COPY_ITEM,
    SQL_DEDUP_BATCH,
    SQL_DELETE_DEDUP,
    SQL_DELETE_ITEMS,
    SQL_DELETE_PARTITION,
    SQL_DELETE_QUEUE_DEDUP,
    SQL_DROP_PARTITION_ITEMS,
    SQL_GET_QUEUE,
    SQL_HOLDS_PARTITIONS,
    SQL_ITEM_BATCH,
    SQL_LAST_ID,
    SQL_NEXT_DEDUP_QUEUE,
    SQL_PARTITIONS,
    SQL_RAISE_LAST_ID,
)
from querator.storage.sqlite._worker import Worker

__all__ = ["Moved", "move_partitions", "remove_database"]

BATCH_ITEMS: Final = 500
"""Most items (or de-duplication records) one batch copies."""
BATCH_BYTES: Final = 8 * 1024 * 1024
"""Payload bytes after which a batch stops taking items (it holds at least one)."""
_PAYLOAD: Final = 12
"""The payload's column in ``SQL_ITEM_BATCH``'s rows."""


@dataclass
class Moved:
    """What a move took from one queue's partitions to the databases of their new owners."""

    partitions: int = 0
    items: int = 0
    dedup: int = 0
    dropped: int = 0
    """Partitions (and de-duplication records) of the queue, deleted, dropped instead of moved."""


def move_partitions(
    databases: Mapping[int, str], owner: Callable[[str, int], int], records: int
) -> dict[str, Moved]:
    """Moves every partition found in ``databases`` (index -> file; those that exist are read) that
    ``owner(queue, number)`` gives to another index into that index's database (created if missing),
    and each queue's de-duplication records to the owner of its partition 0; by queue, what moved.
    What would move of a queue the database ``records`` has no record of is dropped.

    Raises:
        SqliteStorageError: a database cannot be opened, read or written; what committed stays, and a
            later move completes the rest.
    """
    moved: dict[str, Moved] = {}
    with _Connections(databases) as conns, _as_storage_error("moving partitions"):
        exists = _Exists(conns.get(records))
        for index in sorted(i for i, path in databases.items() if os.path.exists(path)):
            source = conns.get(index)
            for key, queue, number in source.execute(SQL_PARTITIONS).fetchall():
                target = owner(queue, number)
                if target == index:
                    continue
                done = moved.setdefault(queue, Moved())
                if not exists(queue):
                    with _transaction(source):
                        source.execute(SQL_DROP_PARTITION_ITEMS, (key,))
                        source.execute(SQL_DELETE_PARTITION, (key,))
                    done.dropped += 1
                    continue
                done.items += _move_partition(source, conns.get(target), key, queue, number)
                done.partitions += 1
            for queue in _dedup_queues(source):
                target = owner(queue, 0)
                if target == index:
                    continue
                if not exists(queue):
                    with _transaction(source):
                        source.execute(SQL_DELETE_QUEUE_DEDUP, (queue,))
                    continue
                moved.setdefault(queue, Moved()).dedup += _move_dedup(source, conns.get(target), queue)
    return moved


class _Exists:
    """Whether a queue has a record in the database of ``conn``, asked once per queue."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._known: dict[str, bool] = {}

    def __call__(self, queue: str) -> bool:
        found = self._known.get(queue)
        if found is None:
            found = self._known[queue] = self._conn.execute(SQL_GET_QUEUE, (queue,)).fetchone() is not None
        return found


def remove_database(path: str) -> None:
    """Removes a database that holds no partition (everything moved out): its marker first, so that a
    crash midway leaves a database to open again rather than a marker saying one is missing.

    Raises:
        SqliteStorageError: it still holds a partition's rows, or cannot be read or removed.
    """
    conn = _open(path)
    try:
        with _as_storage_error(f"reading {path}"):
            holds = conn.execute(SQL_HOLDS_PARTITIONS).fetchone() is not None
    finally:
        conn.close()  # the last connection: sqlite checkpoints and removes the WAL
    if holds:
        raise SqliteStorageError(f"sqlite storage error; {path} still holds partitions after moving them")
    for name in (path + INITIALISED_SUFFIX, path + "-wal", path + "-shm", path):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise SqliteStorageError(
                f"sqlite storage error; cannot remove {name}: {e.strerror or e}"
            ) from None


def _open(path: str) -> sqlite3.Connection:
    try:
        # FULL: a copy must be on disk before the source's delete can be.
        return connect(path, "FULL")
    except sqlite3.Error as e:
        raise storage_error(e, f"cannot open {path}") from None
    except OSError as e:
        raise SqliteStorageError(f"sqlite storage error; cannot open {path}: {e.strerror or e}") from None


class _Connections:
    """A connection to each database a move touches, opened on first use and closed at the end."""

    def __init__(self, databases: Mapping[int, str]) -> None:
        self._databases = databases
        self._open: dict[int, sqlite3.Connection] = {}

    def get(self, index: int) -> sqlite3.Connection:
        conn = self._open.get(index)
        if conn is None:
            conn = self._open[index] = _open(self._databases[index])
        return conn

    def __enter__(self) -> _Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self._open.values():
            conn.close()


@contextlib.contextmanager
def _as_storage_error(context: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as e:
        raise storage_error(e, context) from None


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One committed step of a move: all of it, or nothing of it."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        _commit(conn)
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise


def _commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def _move_partition(
    source: sqlite3.Connection, target: sqlite3.Connection, key: int, queue: str, number: int
) -> int:
    """Moves one partition, a batch at a time; the number of items it held."""
    with _transaction(target):
        target_key = Worker(target).partition_key(queue, number)
    moved = 0
    while batch := _item_batch(source, key):
        with _transaction(target):
            target.executemany(SQL_COPY_ITEM, [(target_key, *row) for row in batch])
        with _transaction(source):
            source.execute(SQL_DELETE_ITEMS, (key, IDS_ENCODER.encode([row[0] for row in batch])))
        moved += len(batch)
    (last_id,) = source.execute(SQL_LAST_ID, (key,)).fetchone()
    with _transaction(target):
        target.execute(SQL_RAISE_LAST_ID, (last_id, target_key))
    with _transaction(source):
        source.execute(SQL_DELETE_PARTITION, (key,))
    return moved


def _item_batch(source: sqlite3.Connection, key: int) -> list[tuple[Any, ...]]:
    """The partition's first items in id order, at most ``BATCH_ITEMS`` or about ``BATCH_BYTES``."""
    batch: list[tuple[Any, ...]] = []
    size = 0
    cursor = source.execute(SQL_ITEM_BATCH, (key, BATCH_ITEMS))
    try:
        for row in cursor:
            batch.append(row)
            size += len(row[_PAYLOAD])
            if size >= BATCH_BYTES:
                break
    finally:
        cursor.close()
    return batch


def _dedup_queues(source: sqlite3.Connection) -> Iterator[str]:
    """The queues with de-duplication records, one index seek each (no scan of every record)."""
    queue = ""
    while row := source.execute(SQL_NEXT_DEDUP_QUEUE, (queue,)).fetchone():
        queue = row[0]
        yield queue


def _move_dedup(source: sqlite3.Connection, target: sqlite3.Connection, queue: str) -> int:
    """Moves a queue's de-duplication records, a batch at a time, each keeping its later expiry."""
    moved = 0
    while batch := source.execute(SQL_DEDUP_BATCH, (queue, BATCH_ITEMS)).fetchall():
        with _transaction(target):
            target.executemany(SQL_COPY_DEDUP, [(queue, dedup_id, expires) for dedup_id, expires in batch])
        with _transaction(source):
            source.execute(SQL_DELETE_DEDUP, (queue, IDS_ENCODER.encode([row[0] for row in batch])))
        moved += len(batch)
    return moved
