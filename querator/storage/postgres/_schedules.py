"""Schedules in PostgreSQL (``ScheduleStore``): one row each in the ``schedules`` table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from querator.storage.postgres._pool import Pool, count, rows, text
from querator.storage.schedules import ScheduleRecord

_DEFINITION: Final = (
    "cron, time_zone, queue, catch_up, catch_up_limit, jitter, paused, start, payload, encoding, kind, "
    "reference, created_at, updated_at"
)
_COLUMNS: Final = f"name, {_DEFINITION}, last_tick"
_GET: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name = %b"
_ADD: Final = (
    f"INSERT INTO schedules ({_COLUMNS}) VALUES ({', '.join(['%b'] * 16)}) ON CONFLICT (name) DO NOTHING"
)
_UPDATE: Final = f"UPDATE schedules SET ({_DEFINITION}) = ({', '.join(['%b'] * 14)}) WHERE name = %b"
_DELETE: Final = "DELETE FROM schedules WHERE name = %b"
_LIST: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name >= %b ORDER BY name LIMIT %b"
_TICK: Final = "UPDATE schedules SET last_tick = %b WHERE name = %b AND last_tick < %b"


def _definition(r: ScheduleRecord) -> tuple[Any, ...]:
    return (
        r.cron, r.time_zone, r.queue, r.catch_up, r.catch_up_limit, r.jitter, r.paused, r.start,
        r.payload, r.encoding, r.kind, r.reference, r.created_at, r.updated_at,
    )  # fmt: skip


def _record(row: Sequence[Any]) -> ScheduleRecord:
    (name, cron, zone, queue, catch_up, limit, jitter, paused, start, payload, encoding, kind, reference,
     created_at, updated_at, last_tick) = row  # fmt: skip
    return ScheduleRecord(
        name=text(name), cron=text(cron), time_zone=text(zone), queue=text(queue), catch_up=text(catch_up),
        catch_up_limit=limit, jitter=jitter, paused=bool(paused), start=start, last_tick=last_tick,
        payload=bytes(payload), encoding=text(encoding), kind=text(kind), reference=text(reference),
        created_at=created_at, updated_at=updated_at,
    )  # fmt: skip


class PostgresSchedules:
    """The ``ScheduleStore`` methods of ``PostgresStore``, each one statement on its pool."""

    pool: Pool

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        found = await self.pool.run(lambda conn: rows(conn, _GET, (name,)))
        return _record(found[0]) if found else None

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        row = (record.name, *_definition(record), record.last_tick)
        return await self.pool.run(lambda conn: count(conn, _ADD, row)) == 1

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        row = (*_definition(record), record.name)
        return await self.pool.run(lambda conn: count(conn, _UPDATE, row)) == 1

    async def delete_schedule(self, name: str) -> bool:
        return await self.pool.run(lambda conn: count(conn, _DELETE, (name,))) == 1

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        return [_record(r) for r in await self.pool.run(lambda conn: rows(conn, _LIST, (pivot, limit)))]

    async def record_tick(self, name: str, tick: int) -> None:
        await self.pool.run(lambda conn: count(conn, _TICK, (tick, name, tick)))
