"""Schedules in PostgreSQL (``ScheduleStore``): one row each in the ``schedules`` table, with its slot
(``storage.schedules.schedule_slot``), and each slot's version in ``schedule_slots``, bumped in the
transaction of every change to one of its schedules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from querator.storage.postgres._pool import Conn, Pool, count, rows, text
from querator.storage.schedules import ScheduleRecord, schedule_slot

_DEFINITION: Final = (
    "cron, time_zone, queue, catch_up, catch_up_limit, jitter, paused, start, payload, encoding, kind, "
    "reference, created_at, updated_at"
)
_COLUMNS: Final = f"name, {_DEFINITION}, last_tick"
_GET: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name = %b"
_ADD: Final = (
    f"INSERT INTO schedules ({_COLUMNS}, slot) VALUES ({', '.join(['%b'] * 17)}) "
    "ON CONFLICT (name) DO NOTHING"
)
_UPDATE: Final = f"UPDATE schedules SET ({_DEFINITION}) = ({', '.join(['%b'] * 14)}) WHERE name = %b"
_DELETE: Final = "DELETE FROM schedules WHERE name = %b"
_LIST: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name >= %b ORDER BY name LIMIT %b"
_TICK: Final = "UPDATE schedules SET last_tick = %b WHERE name = %b AND last_tick < %b"
_LIST_SLOT: Final = f"SELECT {_COLUMNS} FROM schedules WHERE slot = %b AND name >= %b ORDER BY name LIMIT %b"
_BUMP: Final = (
    "INSERT INTO schedule_slots (slot, version) VALUES (%b, 1) "
    "ON CONFLICT (slot) DO UPDATE SET version = schedule_slots.version + 1"
)
_VERSIONS: Final = "SELECT slot, version FROM schedule_slots WHERE slot = ANY(%b::int8[])"


def _changed(statement: str, params: Sequence[Any], name: str) -> Callable[[Conn], bool]:
    """A job that runs ``statement`` and, if it changed a schedule, bumps its slot's version, in one
    transaction."""

    def job(conn: Conn) -> bool:
        with conn.transaction():
            if count(conn, statement, params) != 1:
                return False
            count(conn, _BUMP, (schedule_slot(name),))
            return True

    return job


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
        row = (record.name, *_definition(record), record.last_tick, schedule_slot(record.name))
        return await self.pool.run(_changed(_ADD, row, record.name))

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        row = (*_definition(record), record.name)
        return await self.pool.run(_changed(_UPDATE, row, record.name))

    async def delete_schedule(self, name: str) -> bool:
        return await self.pool.run(_changed(_DELETE, (name,), name))

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        return [_record(r) for r in await self.pool.run(lambda conn: rows(conn, _LIST, (pivot, limit)))]

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        found = await self.pool.run(lambda conn: rows(conn, _LIST_SLOT, (slot, pivot, limit)))
        return [_record(r) for r in found]

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        if not slots:
            return {}
        found = await self.pool.run(lambda conn: rows(conn, _VERSIONS, (list(slots),)))
        return {int(slot): str(version) for slot, version in found}

    async def record_tick(self, name: str, tick: int) -> None:
        await self.pool.run(lambda conn: count(conn, _TICK, (tick, name, tick)))
