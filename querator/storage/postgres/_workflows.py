"""Durable workflows in PostgreSQL (``WorkflowRows``): one row each, replaced by compare-and-set on its
version (docs/adr/0016), and their journals' rows, written in the same transaction (docs/adr/0046).

Every call is one statement, so one round trip: a head with rows is one statement whose journal insert
reads the head's write (``_WITH_ROWS``), rather than a transaction of four (docs/adr/0066).
"""

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
# The rows go in only when the head's write (the CTE ``head``, _INSERT or _REPLACE returning its id)
# changed a row: all in one statement, one snapshot, committed together. The count says whether it did.
_WITH_ROWS: Final = (
    "WITH head AS ({head} RETURNING id), journal AS ("
    "INSERT INTO workflow_entries (id, seq, version, entry) "
    "SELECT head.id, u.seq, %b, u.entry FROM head, unnest(%b::int8[], %b::bytea[]) AS u(seq, entry) "
    "ON CONFLICT (id, seq) DO UPDATE SET version = excluded.version, entry = excluded.entry) "
    "SELECT count(*) FROM head"
)
_INSERT_WITH_ROWS: Final = _WITH_ROWS.format(head=_INSERT)
_REPLACE_WITH_ROWS: Final = _WITH_ROWS.format(head=_REPLACE)
_DROP_ENTRIES: Final = "DELETE FROM workflow_entries WHERE id = %b AND seq <= %b"
_ENTRIES: Final = (
    "SELECT version, entry FROM workflow_entries WHERE id = %b AND seq >= %b AND seq <= %b ORDER BY seq"
)


def _counted(conn: Conn, statement: str, params: tuple[object, ...]) -> int:
    """The count a ``_WITH_ROWS`` statement answers: the heads it wrote."""
    return int(rows(conn, statement, params)[0][0])


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
        inserts = expected_version == 0
        if inserts:
            params = (w.id, w.status, w.version, w.expires_at, record)
        else:
            params = (w.status, w.version, w.expires_at, record, w.id, expected_version)
        if not rows:
            statement = _INSERT if inserts else _REPLACE
            return await self.pool.run(lambda conn: count(conn, statement, params)) == 1
        # One row per seq, the last one given: a statement's upsert may touch a row once.
        by_seq = {e.seq: e for e in rows}
        params += (w.version, list(by_seq), [encode_entry(e) for e in by_seq.values()])
        statement = _INSERT_WITH_ROWS if inserts else _REPLACE_WITH_ROWS
        return await self.pool.run(lambda conn: _counted(conn, statement, params)) == 1

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        found = await self.pool.run(lambda conn: rows(conn, _ENTRIES, (workflow_id, first_seq, last_seq)))
        return [JournalRow(version, decode_entry(bytes(entry))) for version, entry in found]

    async def drop_entries(self, workflow_id: str, last_seq: int) -> None:
        await self.pool.run(lambda conn: count(conn, _DROP_ENTRIES, (workflow_id, last_seq)))

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
