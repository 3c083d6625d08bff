"""The sqlite backend's ``Records``: the ``records`` table, through the writer thread (docs/tenancy.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeVar

from querator.storage.sqlite._worker import Worker

T = TypeVar("T")

_GET: Final = "SELECT value FROM records WHERE kind = ? AND key = ?"
_ADD: Final = "INSERT INTO records (kind, key, value) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
_PUT: Final = "INSERT OR REPLACE INTO records (kind, key, value) VALUES (?, ?, ?)"
_DELETE: Final = "DELETE FROM records WHERE kind = ? AND key = ?"
# sqlite compares TEXT with memcmp of UTF-8 (the BINARY collation): code point order, as the contract says.
_LIST: Final = "SELECT key, value FROM records WHERE kind = ? AND key >= ? ORDER BY key LIMIT ?"
_LIST_TO: Final = (
    "SELECT key, value FROM records WHERE kind = ? AND key >= ? AND key < ? ORDER BY key LIMIT ?"
)

STAMPS_TABLE: Final = """CREATE TABLE IF NOT EXISTS stamps (
        kind TEXT NOT NULL, key TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (kind, key)
    ) WITHOUT ROWID"""
"""Created by ``IF NOT EXISTS`` on every open (``_schema.SCHEMA``), so it needs no migration."""
_RAISE: Final = (
    "INSERT INTO stamps (kind, key, at) VALUES (?, ?, ?) "
    "ON CONFLICT (kind, key) DO UPDATE SET at = max(at, excluded.at)"
)
_STAMP: Final = "SELECT at FROM stamps WHERE kind = ? AND key = ?"
_UNSTAMP: Final = "DELETE FROM stamps WHERE kind = ? AND key = ?"


class SqliteRecords:
    """``Records`` over the store's writer thread: ``SqliteStore`` provides ``_submit``."""

    async def _submit(self, fn: Callable[[Worker], T]) -> T:
        raise NotImplementedError

    async def get_record(self, kind: str, key: str) -> bytes | None:
        def job(worker: Worker) -> bytes | None:
            row = worker.conn.execute(_GET, (kind, key)).fetchone()
            return bytes(row[0]) if row else None

        return await self._submit(job)

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        def job(worker: Worker) -> bool:
            return worker.conn.execute(_ADD, (kind, key, value)).rowcount == 1

        return await self._submit(job)

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(_PUT, (kind, key, value))

        await self._submit(job)

    async def delete_record(self, kind: str, key: str) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(_DELETE, (kind, key))

        await self._submit(job)

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        def job(worker: Worker) -> list[tuple[str, bytes]]:
            if end:
                rows = worker.conn.execute(_LIST_TO, (kind, start, end, limit))
            else:
                rows = worker.conn.execute(_LIST, (kind, start, limit))
            return [(str(k), bytes(v)) for k, v in rows]

        return await self._submit(job)

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        rows = [(kind, key, at) for key, at in stamps.items()]

        def job(worker: Worker) -> None:
            worker.conn.executemany(_RAISE, rows)

        await self._submit(job)

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        def job(worker: Worker) -> dict[str, int]:
            found = {key: worker.conn.execute(_STAMP, (kind, key)).fetchone() for key in keys}
            return {key: int(row[0]) for key, row in found.items() if row is not None}

        return await self._submit(job)

    async def delete_stamp(self, kind: str, key: str) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(_UNSTAMP, (kind, key))

        await self._submit(job)
