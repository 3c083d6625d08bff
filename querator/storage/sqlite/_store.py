"""The store: queue records and the partitions of every queue in one database, served by the writer thread."""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
from collections.abc import Callable
from typing import Final, TypeVar

from querator.storage.base import Partition, QueueRecord
from querator.storage.sqlite._codec import queue_record, queue_row
from querator.storage.sqlite._errors import SqliteStorageError
from querator.storage.sqlite._jobs import Job, noop
from querator.storage.sqlite._partition import SqlitePartition
from querator.storage.sqlite._records import SqliteRecords
from querator.storage.sqlite._schedules import SqliteSchedules
from querator.storage.sqlite._schema import MIN_SQLITE
from querator.storage.sqlite._statements import (
    SQL_ADD_QUEUE,
    SQL_DELETE_PARTITION_ITEMS,
    SQL_DELETE_PARTITIONS,
    SQL_DELETE_QUEUE,
    SQL_DELETE_QUEUE_DEDUP,
    SQL_GET_QUEUE,
    SQL_LIST_QUEUES,
    SQL_PARTITION_QUEUES,
    SQL_PROBE,
    SQL_PURGE_DEDUP,
    SQL_PUT_QUEUE,
)
from querator.storage.sqlite._worker import Worker
from querator.storage.sqlite._workflows import SqliteWorkflowRows
from querator.storage.sqlite._writer import Writer

T = TypeVar("T")

PURGE_LIMIT: Final = 10_000
"""Most expired de-duplication records one purge transaction deletes."""

_SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA", "0", "1", "2", "3"})


def _probe(worker: Worker) -> None:
    worker.conn.execute(SQL_PROBE)


class SqliteStore(SqliteSchedules, SqliteRecords):
    """Queue records, the items of every partition, schedules, durable workflows and tenancy's records
    (``SqliteRecords``) in one sqlite database (WAL mode).

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
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._writer: Writer | None = None
        self._open = False
        self._partitions: dict[tuple[str, int], SqlitePartition] = {}
        self.workflows = SqliteWorkflowRows(self._submit)

    async def open(self) -> None:
        """Starts the writer thread, connects and creates the schema; idempotent.

        Raises:
            SqliteStorageError: the database cannot be opened or has a newer schema.
        """
        writer = self._writer
        if writer is None:
            loop = asyncio.get_running_loop()
            writer = self._writer = Writer(self._path, self._synchronous, self._jobs)
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
        self._jobs.put(Job(noop, done, loop, stop=True))
        try:
            await asyncio.shield(done)
        finally:
            writer.thread.join()
            if self._writer is writer:
                self._writer = None
                self._jobs = queue.SimpleQueue()

    async def _submit(self, fn: Callable[[Worker], T]) -> T:
        """Runs ``fn`` in a transaction on the writer thread (possibly shared with other jobs)."""
        if not self._open:
            raise SqliteStorageError("sqlite storage error; the store is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(Job(fn, future, loop))
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

    async def partition_queues(self) -> list[str]:
        """The names of the queues with a partition here."""

        def job(worker: Worker) -> list[str]:
            return [row[0] for row in worker.conn.execute(SQL_PARTITION_QUEUES)]

        return await self._submit(job)

    async def delete_partitions(self, queue: str, count: int) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(SQL_DELETE_PARTITION_ITEMS, (queue, count))
            worker.conn.execute(SQL_DELETE_PARTITIONS, (queue, count))
            worker.conn.execute(SQL_DELETE_QUEUE_DEDUP, (queue,))
            for number in range(count):
                worker.keys.pop((queue, number), None)

        await self._submit(job)

    async def purge_dedup(self, now: int) -> int:
        def job(worker: Worker) -> int:
            return int(worker.conn.execute(SQL_PURGE_DEDUP, (now, PURGE_LIMIT)).rowcount)

        # A bounded delete per transaction keeps the writer thread free for produces in between.
        purged = total = await self._submit(job)
        while purged == PURGE_LIMIT:
            purged = await self._submit(job)
            total += purged
        return total

    async def get_queue(self, name: str) -> QueueRecord | None:
        def job(worker: Worker) -> QueueRecord | None:
            row = worker.conn.execute(SQL_GET_QUEUE, (name,)).fetchone()
            return queue_record(row) if row else None

        return await self._submit(job)

    async def add_queue(self, record: QueueRecord) -> bool:
        row = queue_row(record)

        def job(worker: Worker) -> bool:
            return worker.conn.execute(SQL_ADD_QUEUE, row).rowcount == 1

        return await self._submit(job)

    async def update_queue(self, record: QueueRecord) -> None:
        row = queue_row(record)

        def job(worker: Worker) -> None:
            worker.conn.execute(SQL_PUT_QUEUE, row)

        await self._submit(job)

    async def delete_queue(self, name: str) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(SQL_DELETE_QUEUE, (name,))

        await self._submit(job)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        def job(worker: Worker) -> list[QueueRecord]:
            return [queue_record(r) for r in worker.conn.execute(SQL_LIST_QUEUES, (namespace, pivot, limit))]

        return await self._submit(job)
