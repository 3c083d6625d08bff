"""Schedules in the sqlite database (``ScheduleStore``): one row each in the ``schedules`` table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from querator.storage.schedules import ScheduleRecord
from querator.storage.sqlite._worker import Worker

T = TypeVar("T")

TABLE: Final = """CREATE TABLE IF NOT EXISTS schedules (
        name TEXT NOT NULL PRIMARY KEY,
        cron TEXT NOT NULL,
        time_zone TEXT NOT NULL,
        queue TEXT NOT NULL,
        catch_up TEXT NOT NULL,
        catch_up_limit INTEGER NOT NULL,
        jitter INTEGER NOT NULL,
        paused INTEGER NOT NULL,
        start INTEGER NOT NULL,
        last_tick INTEGER NOT NULL,
        payload BLOB NOT NULL,
        encoding TEXT NOT NULL,
        kind TEXT NOT NULL,
        reference TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    ) WITHOUT ROWID"""
"""Created by ``IF NOT EXISTS`` on every open (``_schema.SCHEMA``), so it needs no migration."""

_DEFINITION = (
    "cron, time_zone, queue, catch_up, catch_up_limit, jitter, paused, start, payload, encoding, kind, "
    "reference, created_at, updated_at"
)
_COLUMNS = f"name, {_DEFINITION}, last_tick"
_GET: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name = ?"
_ADD: Final = (
    f"INSERT INTO schedules ({_COLUMNS}) VALUES ({', '.join('?' * 16)}) ON CONFLICT (name) DO NOTHING"
)
_UPDATE: Final = f"UPDATE schedules SET ({_DEFINITION}) = ({', '.join('?' * 14)}) WHERE name = ?"
_DELETE: Final = "DELETE FROM schedules WHERE name = ?"
_LIST: Final = f"SELECT {_COLUMNS} FROM schedules WHERE name >= ? ORDER BY name LIMIT ?"
_TICK: Final = "UPDATE schedules SET last_tick = ?1 WHERE name = ?2 AND last_tick < ?1"


def _definition(r: ScheduleRecord) -> tuple[Any, ...]:
    return (
        r.cron, r.time_zone, r.queue, r.catch_up, r.catch_up_limit, r.jitter, int(r.paused), r.start,
        r.payload, r.encoding, r.kind, r.reference, r.created_at, r.updated_at,
    )  # fmt: skip


def _record(row: tuple[Any, ...]) -> ScheduleRecord:
    (name, cron, zone, queue, catch_up, limit, jitter, paused, start, payload, encoding, kind, reference,
     created_at, updated_at, last_tick) = row  # fmt: skip
    return ScheduleRecord(
        name=name, cron=cron, time_zone=zone, queue=queue, catch_up=catch_up, catch_up_limit=limit,
        jitter=jitter, paused=bool(paused), start=start, last_tick=last_tick, payload=bytes(payload),
        encoding=encoding, kind=kind, reference=reference, created_at=created_at, updated_at=updated_at,
    )  # fmt: skip


class SqliteSchedules:
    """The ``ScheduleStore`` methods of ``SqliteStore``, each one job of its writer thread."""

    if TYPE_CHECKING:

        async def _submit(self, fn: Callable[[Worker], T]) -> T: ...

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        def job(worker: Worker) -> ScheduleRecord | None:
            row = worker.conn.execute(_GET, (name,)).fetchone()
            return _record(row) if row else None

        return await self._submit(job)

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        row = (record.name, *_definition(record), record.last_tick)

        def job(worker: Worker) -> bool:
            return worker.conn.execute(_ADD, row).rowcount == 1

        return await self._submit(job)

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        row = (*_definition(record), record.name)

        def job(worker: Worker) -> bool:
            return worker.conn.execute(_UPDATE, row).rowcount == 1

        return await self._submit(job)

    async def delete_schedule(self, name: str) -> bool:
        def job(worker: Worker) -> bool:
            return worker.conn.execute(_DELETE, (name,)).rowcount == 1

        return await self._submit(job)

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        def job(worker: Worker) -> list[ScheduleRecord]:
            return [_record(r) for r in worker.conn.execute(_LIST, (pivot, limit))]

        return await self._submit(job)

    async def record_tick(self, name: str, tick: int) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(_TICK, (tick, name))

        await self._submit(job)
