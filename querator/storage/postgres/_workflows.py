"""Durable workflows in PostgreSQL (``WorkflowRows``): one row each, replaced by compare-and-set on its
version (docs/adr/0016)."""

from __future__ import annotations

from typing import Final

from querator.storage.postgres._pool import Pool, count, rows
from querator.storage.workflows import Workflow, decode_workflow, encode_workflow, workflow_page

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
    "DELETE FROM workflows WHERE id IN "
    "(SELECT id FROM workflows WHERE expires_at > 0 AND expires_at <= %b LIMIT %b)"
)


class PostgresWorkflowRows:
    """The ``WorkflowRows`` of ``PostgresStore``, each one statement on its pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        found = await self.pool.run(lambda conn: rows(conn, _GET, (workflow_id,)))
        return decode_workflow(bytes(found[0][0])) if found else None

    async def put_workflow(self, workflow: Workflow, expected_version: int) -> bool:
        record, w = encode_workflow(workflow), workflow
        if expected_version == 0:
            params = (w.id, w.status, w.version, w.expires_at, record)
            return await self.pool.run(lambda conn: count(conn, _INSERT, params)) == 1
        replace = (w.status, w.version, w.expires_at, record, w.id, expected_version)
        return await self.pool.run(lambda conn: count(conn, _REPLACE, replace)) == 1

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        if status:
            found = await self.pool.run(lambda conn: rows(conn, _LIST_STATUS, (status, pivot, limit)))
        else:
            found = await self.pool.run(lambda conn: rows(conn, _LIST, (pivot, limit)))
        return workflow_page((bytes(r[0]) for r in found), status, pivot, limit)

    async def purge_workflows(self, now: int) -> int:
        purged = total = await self.pool.run(lambda conn: count(conn, _PURGE, (now, PURGE_LIMIT)))
        while purged == PURGE_LIMIT:
            purged = await self.pool.run(lambda conn: count(conn, _PURGE, (now, PURGE_LIMIT)))
            total += purged
        return total
