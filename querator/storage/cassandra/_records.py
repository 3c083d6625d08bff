"""The Cassandra backend's ``Records``: the ``records`` table, a partition per kind (docs/tenancy.md).

Every write is a lightweight transaction, as queue records are: mixing them with plain writes on one
row would order its writes by two clocks. A put is an insert if absent, else an update if present,
tried again in the rare case a delete slipped in between.
"""

from __future__ import annotations

from typing import Final

from querator.storage.cassandra._session import Connection, Cql
from querator.storage.cassandra._statements import Statement

_PUT_ATTEMPTS: Final = 3


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
