"""The PostgreSQL store's ``Records``: the ``records`` table (docs/tenancy.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from querator.storage.postgres._pool import Pool, count, rows, text

_GET: Final = "SELECT value FROM records WHERE kind = %b AND key = %b"
_ADD: Final = "INSERT INTO records (kind, key, value) VALUES (%b, %b, %b) ON CONFLICT DO NOTHING"
_PUT: Final = (
    "INSERT INTO records (kind, key, value) VALUES (%b, %b, %b) "
    "ON CONFLICT (kind, key) DO UPDATE SET value = excluded.value"
)
_DELETE: Final = "DELETE FROM records WHERE kind = %b AND key = %b"
# key is the BYTEA of its UTF-8: byte order, which is code point order, as the contract says.
_LIST: Final = "SELECT key, value FROM records WHERE kind = %b AND key >= %b ORDER BY key LIMIT %b"
_LIST_TO: Final = (
    "SELECT key, value FROM records WHERE kind = %b AND key >= %b AND key < %b ORDER BY key LIMIT %b"
)

_RAISE: Final = (
    "INSERT INTO stamps (kind, key, at) SELECT %b, unnest(%b::bytea[]), unnest(%b::int8[]) "
    "ON CONFLICT (kind, key) DO UPDATE SET at = greatest(stamps.at, excluded.at)"
)
_STAMPS: Final = "SELECT key, at FROM stamps WHERE kind = %b AND key = ANY(%b::bytea[])"
_UNSTAMP: Final = "DELETE FROM stamps WHERE kind = %b AND key = %b"


class PostgresRecords:
    """``Records`` on the store's pool: ``PostgresStore`` provides ``pool``."""

    pool: Pool

    async def get_record(self, kind: str, key: str) -> bytes | None:
        found = await self.pool.run(lambda conn: rows(conn, _GET, (kind, key)))
        return bytes(found[0][0]) if found else None

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        return await self.pool.run(lambda conn: count(conn, _ADD, (kind, key, value))) == 1

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        await self.pool.run(lambda conn: count(conn, _PUT, (kind, key, value)))

    async def delete_record(self, kind: str, key: str) -> None:
        await self.pool.run(lambda conn: count(conn, _DELETE, (kind, key)))

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        if end:
            found = await self.pool.run(lambda conn: rows(conn, _LIST_TO, (kind, start, end, limit)))
        else:
            found = await self.pool.run(lambda conn: rows(conn, _LIST, (kind, start, limit)))
        return [(text(k), bytes(v)) for k, v in found]

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        if stamps:
            params = (kind, list(stamps), list(stamps.values()))
            await self.pool.run(lambda conn: count(conn, _RAISE, params))

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        if not keys:
            return {}
        found = await self.pool.run(lambda conn: rows(conn, _STAMPS, (kind, list(keys))))
        return {text(k): int(at) for k, at in found}

    async def delete_stamp(self, kind: str, key: str) -> None:
        await self.pool.run(lambda conn: count(conn, _UNSTAMP, (kind, key)))
