"""The Cassandra backend's ``Records``: the ``records`` table, a partition per kind (docs/tenancy.md), and
stamps in the ``stamps`` table, a partition per key.

Every write is a lightweight transaction, as queue records are: mixing them with plain writes on one
row would order its writes by two clocks. A put is an insert if absent, else an update if present,
tried again in the rare case a delete slipped in between.

A stamp is a plain write whose write time is its value (``USING TIMESTAMP``): Cassandra keeps the cell
with the greatest write time, so the greatest stamp wins on every replica without a read or a
lightweight transaction, whichever member writes last (docs/adr/0041). Stamps are never mixed with
records' transactions: they have a table of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from querator.storage.cassandra._session import Connection, Cql
from querator.storage.cassandra._statements import Statement

_PUT_ATTEMPTS: Final = 3
_STAMPS_READ: Final = 100
"""Keys of one ``IN`` of ``get_stamps`` (a page of a key list)."""


class CassandraRecords:
    """``Records`` over the store's connection: ``CassandraStore`` sets ``_connection``."""

    _connection: Connection

    async def get_record(self, kind: str, key: str) -> bytes | None:
        rows = await self._connection.call(lambda cql: cql.rows(Statement.GET_RECORD, (kind, key)))
        return bytes(rows[0]["value"]) if rows else None

    async def add_record(self, kind: str, key: str, value: bytes) -> bool:
        def add(cql: Cql) -> bool:
            return cql.applied(Statement.ADD_RECORD, (kind, key, value))[0]

        return await self._connection.call(add, writes=True)

    async def put_record(self, kind: str, key: str, value: bytes) -> None:
        def put(cql: Cql) -> None:
            for _ in range(_PUT_ATTEMPTS):
                if cql.applied(Statement.ADD_RECORD, (kind, key, value))[0]:
                    return
                if cql.applied(Statement.SET_RECORD, (value, kind, key))[0]:
                    return

        await self._connection.call(put, writes=True)

    async def delete_record(self, kind: str, key: str) -> None:
        await self._connection.call(
            lambda cql: cql.applied(Statement.DELETE_RECORD, (kind, key)), writes=True
        )

    async def list_records(self, kind: str, start: str, end: str, limit: int) -> list[tuple[str, bytes]]:
        def list_(cql: Cql) -> list[tuple[str, bytes]]:
            if end:
                rows = cql.rows(Statement.LIST_RECORDS_TO, (kind, start, end, limit))
            else:
                rows = cql.rows(Statement.LIST_RECORDS, (kind, start, limit))
            return [(str(r["key"]), bytes(r["value"])) for r in rows]

        return await self._connection.call(list_)

    async def raise_stamps(self, kind: str, stamps: Mapping[str, int]) -> None:
        def raise_(cql: Cql) -> None:
            for key, at in stamps.items():
                cql.rows(Statement.RAISE_STAMP, (at, at, kind, key))

        if stamps:
            await self._connection.call(raise_, writes=True)

    async def get_stamps(self, kind: str, keys: Sequence[str]) -> dict[str, int]:
        wanted = list(keys)

        def get(cql: Cql) -> dict[str, int]:
            found: dict[str, int] = {}
            for start in range(0, len(wanted), _STAMPS_READ):
                rows = cql.rows(Statement.GET_STAMPS, (kind, wanted[start : start + _STAMPS_READ]))
                found.update((str(r["key"]), int(r["at"])) for r in rows if r["at"] is not None)
            return found

        return await self._connection.call(get) if wanted else {}

    async def delete_stamp(self, kind: str, key: str) -> None:
        await self._connection.call(lambda cql: cql.rows(Statement.DELETE_STAMP, (kind, key)), writes=True)
