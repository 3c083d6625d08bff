"""The store: queue records, and the partitions of every queue, in one Cassandra keyspace."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from querator.storage.base import Partition, QueueRecord
from querator.storage.cassandra._codec import queue_record, queue_row
from querator.storage.cassandra._fence import FenceReads
from querator.storage.cassandra._partition import CassandraPartition, Segments, SendHook
from querator.storage.cassandra._records import CassandraRecords
from querator.storage.cassandra._schedules import CassandraSchedules
from querator.storage.cassandra._session import Connection, Cql
from querator.storage.cassandra._settings import CassandraSettings
from querator.storage.cassandra._statements import Statement
from querator.storage.cassandra._workflows import CassandraWorkflowRows

THREADS: Final = 4
"""Worker threads for transactions: one per partition at a time, a few partitions in parallel."""


class CassandraStore(CassandraSchedules, CassandraRecords):
    """Queue records, partitions, schedules, durable workflows and tenancy's records (``CassandraRecords``)
    in a Cassandra keyspace.

    Args:
        settings: How to connect and which keyspace to use.
        epoch: The owner epoch this store claims partitions with on first use. A single node passes a
            value that grows across restarts (the start time in microseconds); the cluster passes the
            epoch it got for a partition from etcd through ``claim``.
        now: The clock's ``now`` (microseconds), for the TTL of dedup entries.
        segments: How far the partitions' tail segments grow (tests make them small).
        send: Wraps every step a partition's run sends (tests break runs there).
        before_request: Called before each blocking statement is sent (tests); see ``Connection``.
    """

    def __init__(
        self,
        settings: CassandraSettings,
        epoch: int,
        now: Callable[[], int],
        *,
        segments: Segments | None = None,
        send: SendHook | None = None,
        before_request: Callable[[Statement], None] | None = None,
    ) -> None:
        self.settings = settings
        self.epoch = epoch
        self.clock_now = now
        self._segments = segments or Segments()
        self._send = send
        self._threads = ThreadPoolExecutor(THREADS, thread_name_prefix="querator-cassandra")
        self._connection = Connection(settings, self._threads, before_request)
        self._fences = FenceReads(self._connection)
        self.run_counters = self._connection.counters
        """What the partitions' runs cost (``CountsRuns``)."""
        self._partitions: dict[tuple[str, int], CassandraPartition] = {}
        self.workflows = CassandraWorkflowRows(self._connection, now)

    async def open(self) -> None:
        """Connects, creates the keyspace and tables when missing, prepares every statement; idempotent.

        Raises:
            CassandraStorageError: Cassandra cannot be reached, or the schema is newer than ours.
        """
        await self._connection.open()

    async def close(self) -> None:
        """Waits for running transactions, then closes the connections."""
        for partition in self._partitions.values():
            async with partition._lock:
                pass
        await self._connection.close()

    def partition(self, queue: str, number: int) -> Partition:
        return self._partition(queue, number)

    def _partition(self, queue: str, number: int) -> CassandraPartition:
        key = (queue, number)
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = CassandraPartition(
                self._connection,
                self._fences,
                self._threads,
                queue,
                number,
                self.epoch,
                self.clock_now,
                self._segments,
                self._send,
            )
        return part

    async def claim(self, queue: str, number: int, epoch: int) -> None:
        """Makes ``epoch`` the owner of a partition (a lightweight transaction on its row and tail).

        From then on a store that wrote with an older epoch gets ``StaleOwnerError`` for its next write
        to the partition and stops serving it.

        Raises:
            StaleOwnerError: the partition is owned by a newer epoch already.
            CassandraStorageError: Cassandra failed.
        """
        await self._partition(queue, number).claim(epoch)

    async def delete_partitions(self, queue: str, count: int) -> None:
        """Resets the partitions to empty: their segments are dropped and numbering continues after them,
        so no segment number is written again after its deletion."""

        def reset(cql: Cql) -> None:
            for number in range(count):
                rows = cql.rows(Statement.GET_PARTITION, (queue, number))
                if not rows:
                    continue
                segments = rows[0]["segments"] or {}
                for segment in segments:
                    cql.rows(Statement.DROP_SEGMENT, (queue, number, segment))
                fresh = max([rows[0]["tail"], *segments]) + 1
                cql.applied(Statement.RESET_PARTITION, (fresh, fresh, {fresh: ""}, queue, number))

        for number in range(count):
            part = self._partitions.get((queue, number))
            if part is not None:
                async with part._lock:
                    part.forget()
        await self._connection.call(reset, writes=True)

    async def purge_dedup(self, now: int) -> int:
        """Nothing to do: dedup claims expire by their TTL."""
        return 0

    async def check(self) -> None:
        """Nothing beyond what reads and the partitions' own failures show: a Cassandra node out of disk
        fails writes, which mark their partitions failing."""

    async def get_queue(self, name: str) -> QueueRecord | None:
        rows = await self._connection.call(lambda cql: cql.rows(Statement.GET_QUEUE, (name,)))
        return queue_record(rows[0]) if rows else None

    async def add_queue(self, record: QueueRecord) -> bool:
        def add(cql: Cql) -> bool:
            applied, _ = cql.applied(Statement.ADD_QUEUE, queue_row(record))
            if applied:
                cql.rows(Statement.INDEX_QUEUE, (record.namespace, record.name))
            return applied

        return await self._connection.call(add, writes=True)

    async def update_queue(self, record: QueueRecord) -> None:
        # Read in a call of its own: its failure sent no write, so the outcome is known.
        before = await self.get_queue(record.name)
        if before is None:
            return  # nothing to update, and no index entry for a queue that does not exist

        def update(cql: Cql) -> None:
            row = queue_row(record)
            cql.applied(Statement.UPDATE_QUEUE, (*row[1:], record.name))
            if before.namespace != record.namespace:
                cql.rows(Statement.UNINDEX_QUEUE, (before.namespace, record.name))
            cql.rows(Statement.INDEX_QUEUE, (record.namespace, record.name))

        await self._connection.call(update, writes=True)

    async def delete_queue(self, name: str) -> None:
        before = await self.get_queue(name)
        if before is None:
            return

        def delete(cql: Cql) -> None:
            cql.applied(Statement.DELETE_QUEUE, (name,))
            cql.rows(Statement.UNINDEX_QUEUE, (before.namespace, name))

        await self._connection.call(delete, writes=True)

    async def list_queues(self, pivot: str, limit: int, namespace: str) -> list[QueueRecord]:
        def list_(cql: Cql) -> list[QueueRecord]:
            names = [r["name"] for r in cql.rows(Statement.LIST_QUEUES, (namespace, pivot, limit))]
            records = []
            for name in names:
                rows = cql.rows(Statement.GET_QUEUE, (name,))
                if rows:
                    records.append(queue_record(rows[0]))
            return records

        return await self._connection.call(list_)
