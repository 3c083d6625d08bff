"""Durable workflows' records in the database: one row each, replaced by compare-and-set on its version,
and their journals' rows, written in the same transaction (docs/adr/0046)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol, TypeVar

from querator.storage.sqlite._worker import Worker
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

T = TypeVar("T")


class Submit(Protocol):
    """``SqliteStore._submit``: runs a job in a transaction on the writer thread."""

    def __call__(self, fn: Callable[[Worker], T], /) -> Awaitable[T]: ...


PURGE_LIMIT: Final = 1_000
"""Most expired workflows one purge transaction deletes, so produces run in between."""

SQL_GET: Final = "SELECT record FROM workflows WHERE id = ?"
SQL_INSERT: Final = (
    "INSERT INTO workflows (id, status, version, expires_at, record) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
SQL_REPLACE: Final = (
    "UPDATE workflows SET status = ?, version = ?, expires_at = ?, record = ? WHERE id = ? AND version = ?"
)
SQL_LIST: Final = "SELECT record FROM workflows WHERE id >= ? ORDER BY id LIMIT ?"
SQL_LIST_STATUS: Final = "SELECT record FROM workflows WHERE status = ? AND id >= ? ORDER BY id LIMIT ?"
SQL_EXPIRED: Final = "SELECT id FROM workflows WHERE expires_at > 0 AND expires_at <= ? LIMIT ?"
SQL_PURGE: Final = "DELETE FROM workflows WHERE id = ?"
SQL_PURGE_ENTRIES: Final = "DELETE FROM workflow_entries WHERE id = ?"
SQL_DROP_ENTRIES: Final = "DELETE FROM workflow_entries WHERE id = ? AND seq <= ?"
SQL_PUT_ENTRY: Final = (
    "INSERT INTO workflow_entries (id, seq, version, entry) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id, seq) DO UPDATE SET version = excluded.version, entry = excluded.entry"
)
SQL_ENTRIES: Final = (
    "SELECT version, entry FROM workflow_entries WHERE id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
)


class SqliteWorkflowRows:
    """The ``WorkflowRows`` of ``SqliteStore``, run as jobs of its writer thread (``submit``)."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit

    async def get_workflow(self, workflow_id: str) -> Workflow | None:
        def job(worker: Worker) -> Workflow | None:
            row = worker.conn.execute(SQL_GET, (workflow_id,)).fetchone()
            return decode_workflow(row[0]) if row else None

        return await self._submit(job)

    async def put_workflow(
        self, workflow: Workflow, expected_version: int, rows: Sequence[Entry] = ()
    ) -> bool:
        record = encode_workflow(workflow)
        w = workflow
        entries = [(w.id, e.seq, w.version, encode_entry(e)) for e in rows]

        def job(worker: Worker) -> bool:
            if expected_version == 0:
                params = (w.id, w.status, w.version, w.expires_at, record)
                put = worker.conn.execute(SQL_INSERT, params).rowcount == 1
            else:
                params2 = (w.status, w.version, w.expires_at, record, w.id, expected_version)
                put = worker.conn.execute(SQL_REPLACE, params2).rowcount == 1
            if put and entries:
                worker.conn.executemany(SQL_PUT_ENTRY, entries)
            return put

        return await self._submit(job)

    async def get_entries(self, workflow_id: str, first_seq: int, last_seq: int) -> list[JournalRow]:
        def job(worker: Worker) -> list[JournalRow]:
            found = worker.conn.execute(SQL_ENTRIES, (workflow_id, first_seq, last_seq))
            return [JournalRow(version, decode_entry(entry)) for version, entry in found]

        return await self._submit(job)

    async def drop_entries(self, workflow_id: str, last_seq: int) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(SQL_DROP_ENTRIES, (workflow_id, last_seq))

        await self._submit(job)

    async def list_workflows(self, status: str, pivot: str, limit: int) -> list[Workflow]:
        def job(worker: Worker) -> list[Workflow]:
            if status:
                rows = worker.conn.execute(SQL_LIST_STATUS, (status, pivot, limit))
            else:
                rows = worker.conn.execute(SQL_LIST, (pivot, limit))
            return workflow_page((r[0] for r in rows), status, pivot, limit)

        return await self._submit(job)

    async def purge_workflows(self, now: int) -> int:
        def job(worker: Worker) -> int:
            expired = [(r[0],) for r in worker.conn.execute(SQL_EXPIRED, (now, PURGE_LIMIT))]
            worker.conn.executemany(SQL_PURGE_ENTRIES, expired)
            worker.conn.executemany(SQL_PURGE, expired)
            return len(expired)

        purged = total = await self._submit(job)
        while purged == PURGE_LIMIT:
            purged = await self._submit(job)
            total += purged
        return total
