"""The store: queue records, and the partitions of every queue, in one PostgreSQL schema."""

from __future__ import annotations

from typing import Final

from psycopg.sql import SQL, Identifier

from querator.storage.base import Partition, QueueRecord
from querator.storage.postgres import _statements as sql
from querator.storage.postgres._codec import queue_record, queue_row
from querator.storage.postgres._errors import PostgresStorageError
from querator.storage.postgres._partition import PostgresPartition
from querator.storage.postgres._pool import Conn, Pool, rows, text, transaction
from querator.storage.postgres._pool import count as row_count
from querator.storage.postgres._records import PostgresRecords
from querator.storage.postgres._schedules import PostgresSchedules
from querator.storage.postgres._schema import LOCK_KEY, MIGRATIONS, SCHEMA, SCHEMA_VERSION
from querator.storage.postgres._settings import PostgresSettings
from querator.storage.postgres._workflows import PostgresWorkflowRows

PURGE_LIMIT: Final = 10_000
"""Most expired de-duplication records one purge statement deletes."""


class PostgresStore(PostgresSchedules, PostgresRecords):
    """Queue records, the items of every partition, schedules, durable workflows and tenancy's records
    in one PostgreSQL schema, shared by every node that opens it.

    Args:
        settings: How to connect and which schema to use.
        epoch: The owner epoch this store claims partitions with on first use: a node's start time in
            microseconds, which grows across restarts (docs/adr/0011).
    """

    def __init__(self, settings: PostgresSettings, epoch: int) -> None:
        self.settings = settings
        self.epoch = epoch
        self.pool = Pool(settings)
        self.workflows = PostgresWorkflowRows(self.pool)
        self._partitions: dict[tuple[str, int], PostgresPartition] = {}
        self._opened = False

    async def open(self) -> None:
        """Connects, creates the schema and its tables or migrates them; idempotent.

        Raises:
            PostgresStorageError: PostgreSQL cannot be reached, or the schema is newer than ours.
        """
        if self._opened:
            return
        if self.pool.closed:
            self.pool = self.workflows.pool = Pool(self.settings)
        await self.pool.run(self._prepare)
        self._opened = True

    def _prepare(self, conn: Conn) -> None:
        schema = self.settings.schema

        def body() -> None:
            # Nodes starting together must not create the same schema or table at once: IF NOT EXISTS
            # alone races to a unique violation.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            if schema:
                conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(schema)))
            conn.execute(SCHEMA[0])
            found = rows(conn, "SELECT max(version) FROM querator_schema")[0][0]
            version = int(found) if found is not None else 0
            if version > SCHEMA_VERSION:
                raise PostgresStorageError(
                    f"postgres storage error; schema version {version} of {self.settings.describe()} is "
                    f"newer than the supported version {SCHEMA_VERSION}"
                )
            for statement in SCHEMA[1:]:
                conn.execute(statement)
            for target in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target]:
                    conn.execute(statement)
            if version < SCHEMA_VERSION:
                conn.execute("DELETE FROM querator_schema")
                conn.execute("INSERT INTO querator_schema (version) VALUES (%s)", (SCHEMA_VERSION,))

        transaction(conn, body)

    async def close(self) -> None:
        """Waits for running transactions, then closes the connections."""
        self._opened = False
        await self.pool.close()

    async def check(self) -> None:
        """Raises ``PostgresStorageError`` when PostgreSQL does not answer."""
        await self.pool.run(lambda conn: rows(conn, "SELECT 1"))

    def partition(self, queue: str, number: int) -> Partition:
        return self._partition(queue, number)

    def _partition(self, queue: str, number: int) -> PostgresPartition:
        key = (queue, number)
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = PostgresPartition(self, queue, number)
        return part

    async def partition_queues(self) -> list[str]:
        """The names of the queues with a partition here."""
        return [text(r[0]) for r in await self.pool.run(lambda conn: rows(conn, sql.PARTITION_QUEUES))]

    async def delete_partitions(self, queue: str, count: int) -> None:
        def job(conn: Conn) -> None:
            def body() -> None:
                conn.execute(sql.DELETE_PARTITION_ITEMS, (queue, count))
                conn.execute(sql.DELETE_PARTITIONS, (queue, count))
                conn.execute(sql.DELETE_QUEUE_DEDUP, (queue,))

            transaction(conn, body)

        await self.pool.run(job)
        for number in range(count):
            part = self._partitions.get((queue, number))
            if part is not None:
                part.forget()

    async def purge_dedup(self, now: int) -> int:
        def job(conn: Conn) -> int:
            return row_count(conn, sql.PURGE_DEDUP, (now, PURGE_LIMIT))

        # A bounded delete per statement keeps it short, and the rows it locks few.
        purged = total = await self.pool.run(job)
        while purged == PURGE_LIMIT:
            purged = await self.pool.run(job)
            total += purged
        return total

    async def get_queue(self, name: str) -> QueueRecord | None:
        found = await self.pool.run(lambda conn: rows(conn, sql.GET_QUEUE, (name,)))
        return queue_record(found[0]) if found else None

    async def add_queue(self, record: QueueRecord) -> bool:
        row = queue_row(record)
        return await self.pool.run(lambda conn: row_count(conn, sql.ADD_QUEUE, row)) == 1

    async def update_queue(self, record: QueueRecord) -> None:
        row = queue_row(record)
        await self.pool.run(lambda conn: row_count(conn, sql.PUT_QUEUE, row))

    async def delete_queue(self, name: str) -> None:
        await self.pool.run(lambda conn: row_count(conn, sql.DELETE_QUEUE, (name,)))

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        found = await self.pool.run(lambda conn: rows(conn, sql.LIST_QUEUES, (namespace, pivot, limit)))
        return [queue_record(r) for r in found]
