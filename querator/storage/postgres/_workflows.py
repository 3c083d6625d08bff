"""Durable workflows in PostgreSQL (``WorkflowRows``): one row each, replaced by compare-and-set on its
version (docs/adr/0016), and their journals' rows, written in the same transaction (docs/adr/0046)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from querator.storage.postgres._pool import Conn, Pool, count, rows
from querator.storage.workflows import (
    Entry,
    JournalRow,
    Workflow,
    decode_entry,
    decode_workflow,
    encode_entry,
    encode_workflow,
    workflow_page,
)

PURGE_LIMIT: Final = 1_000
"""Most expired workflows one purge statement deletes, so that runs go on in between."""

_GET: Final = "SELECT record FROM workflows WHERE id = %b"
_INSERT: Final = (
    "INSERT INTO workflows (id, status, version, expires_at, record) VALUES (%b, %b, %b, %b, %b) "
    "ON CONFLICT (id) DO NOTHING"
)
_REPLACE: Final = (
    "UPDATE workflows SET status = %b, version = %b, expires_at = %b, record = %b "
    "WHERE id = %b AND version = %b"
)
_LIST: Final = "SELECT record FROM workflows WHERE id >= %b ORDER BY id LIMIT %b"
_LIST_STATUS: Final = "SELECT record FROM workflows WHERE status = %b AND id >= %b ORDER BY id LIMIT %b"
_PURGE: Final = (
    "WITH gone AS (DELETE FROM workflows WHERE id IN "
    "(SELECT id FROM workflows WHERE expires_at > 0 AND expires_at <= %b LIMIT %b) RETURNING id), "
    "journals AS (DELETE FROM workflow_entries WHERE id IN (SELECT id FROM gone)) "
    "SELECT count(*) FROM gone"
)
_PUT_ENTRY: Final = (
    "INSERT INTO workflow_entries (id, seq, version, entry) VALUES (%b, %b, %b, %b) "
    "ON CONFLICT (id, seq) DO UPDATE SET version = excluded.version, entry = excluded.entry"
)
_ENTRIES: Final = (
    "SELECT version, entry FROM workflow_entries WHERE id = %b AND seq >= %b AND seq <= %b ORDER BY seq"
)


class PostgresWorkflowRows:
    """The ``WorkflowRows`` of ``PostgresStore``, each one statement on its pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        found = await self.pool.run(lambda conn: rows(conn, _GET, (workflow_id,)))
        return decode_workflow(bytes(found[0][0])) if found else None

    async def put_workflow(
        self, workflow: Workflow, expected_version: int, rows: Sequence[Entry] = ()
    ) -> bool:
        record, w = encode_workflow(workflow), workflow
        params: tuple[object, ...]
        if expected_version == 0:
            statement, params = _INSERT, (w.id, w.status, w.version, w.expires_at, record)
        else:
            statement, params = _REPLACE, (w.status, w.version, w.expires_at, record, w.id, expected_version)
        if not rows:
            return await self.pool.run(lambda conn: count(conn, statement, params)) == 1
        entries = [(w.id, e.seq, w.version, encode_entry(e)) for e in rows]

        def put(conn: Conn) -> bool:
            with conn.transaction():
                if count(conn, statement, params) != 1:
                    return False
                conn.cursor().executemany(_PUT_ENTRY, entries)
                return True

        return await self.pool.run(put)

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        found = await self.pool.run(lambda conn: rows(conn, _ENTRIES, (workflow_id, first_seq, last_seq)))
        return [JournalRow(version, decode_entry(bytes(entry))) for version, entry in found]

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        if status:
            found = await self.pool.run(lambda conn: rows(conn, _LIST_STATUS, (status, pivot, limit)))
        else:
            found = await self.pool.run(lambda conn: rows(conn, _LIST, (pivot, limit)))
        return workflow_page((bytes(r[0]) for r in found), status, pivot, limit)

    async def purge_workflows(self, now: int) -> int:
        def purge(conn: Conn) -> int:
            return int(rows(conn, _PURGE, (now, PURGE_LIMIT))[0][0])

        purged = total = await self.pool.run(purge)
        while purged == PURGE_LIMIT:
            purged = await self.pool.run(purge)
            total += purged
        return total
