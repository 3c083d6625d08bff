"""Durable workflows' records in the keyspace: lightweight transactions on ``version``, an index by status."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import zlib
from collections.abc import Callable, Iterator
from typing import Final

from querator.clock import MICROS
from querator.storage.cassandra._errors import DRIVER_ERRORS, storage_error
from querator.storage.cassandra._session import Connection, Cql, Rows
from querator.storage.cassandra._statements import Statement
from querator.storage.workflows import Workflow, decode_workflow, encode_workflow, workflow_page
from querator.wire.workflows import RUNNING, STATUSES

BUCKETS: Final = 16
"""Partitions of ``workflows_by_status`` per status."""


def _bucket(workflow_id: str) -> int:
    return zlib.crc32(workflow_id.encode()) % BUCKETS


class CassandraWorkflowRows:
    """The ``WorkflowRows`` of ``CassandraStore``.

    A record is written with a lightweight transaction only (never mixed with plain writes, whose
    timestamps would order differently). The status index is written after the record: a stale index row
    (a crash in between, or a record expired before its row) is skipped by ``list_workflows``, which
    reads each record it names.

    A record's read and write are sent from the event loop (``Connection.execute_async``): a workflow's
    every step reads and then writes its record, and on the store's few worker threads each would hold
    one for a round trip and a Paxos round, ahead of the queues' runs (issue 38).
    """

    def __init__(self, connection: Connection, now: Callable[[], int]) -> None:
        self._connection = connection
        self.clock_now = now

    async def _send(self, statement: Statement, params: tuple[object, ...], writes: bool = False) -> Rows:
        """Sends one statement from the event loop; a failure of a write may have been applied."""
        bound = self._connection.opened().stmt(statement).bind(params)
        try:
            return await self._connection.execute_async(asyncio.get_running_loop(), bound)
        except DRIVER_ERRORS as e:
            raise storage_error(e, sent=writes) from e

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        rows = await self._send(Statement.GET_WORKFLOW, (workflow_id,))
        # A record first written by an INSERT (before ADD_WORKFLOW became an UPDATE) leaves its key alone
        # once its columns' TTL passes: such a row is a workflow dropped after its retention.
        record = rows[0]["record"] if rows else None
        return decode_workflow(record) if record is not None else None

    async def put_workflow(self, workflow: Workflow, expected_version: int) -> bool:
        record = encode_workflow(workflow)
        ttl_s = 0
        if workflow.expires_at:
            ttl_s = max(1, (workflow.expires_at - self.clock_now()) // MICROS)
        w = workflow
        if expected_version == 0:
            rows = await self._send(Statement.ADD_WORKFLOW, (ttl_s, w.version, record, w.id), writes=True)
        else:
            params = (ttl_s, w.version, record, w.id, expected_version)
            rows = await self._send(Statement.PUT_WORKFLOW, params, writes=True)
        applied = bool(rows and rows[0]["[applied]"])
        if applied and (expected_version == 0 or w.status != RUNNING):
            bucket = _bucket(w.id)
            if w.status != RUNNING:
                await self._send(Statement.UNINDEX_WORKFLOW, (RUNNING, bucket, w.id), writes=True)
            await self._send(Statement.INDEX_WORKFLOW, (w.status, bucket, w.id, ttl_s), writes=True)
        return applied

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        def list_(cql: Cql) -> list[Workflow]:
            ids: list[list[str]] = []
            for s in (status,) if status else STATUSES:
                for bucket in range(BUCKETS):
                    rows = cql.rows(Statement.LIST_WORKFLOWS, (s, bucket, pivot, limit))
                    ids.append([r["id"] for r in rows])

            def records() -> Iterator[bytes]:
                # One read each, as the page takes them; an index row may outlive its record's status, so
                # an id started again may have a row under each status (grouped: they come together).
                for workflow_id, _ in itertools.groupby(heapq.merge(*ids)):
                    rows = cql.rows(Statement.GET_WORKFLOW, (workflow_id,))
                    if rows and rows[0]["record"] is not None:  # (expired: see get_workflow)
                        yield rows[0]["record"]

            return workflow_page(records(), status, pivot, limit)

        return await self._connection.call(list_)

    async def purge_workflows(self, now: int) -> int:
        """Nothing to do: finished records and their index rows expire by their TTL."""
        return 0
