"""Schedules in the sqlite database (``ScheduleStore``): one row each in the ``schedules`` table, their
names by slot in ``schedule_slot_names`` and each slot's version in ``schedule_slots``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from querator.storage.schedules import ScheduleRecord, schedule_slot
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
SLOT_TABLES: Final = (
    # Created like TABLE, and filled from it on every open (``fill_slots``): a database written by an
    # older version, which kept no slots, needs no migration.
    """CREATE TABLE IF NOT EXISTS schedule_slot_names (
        slot INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY (slot, name)) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS schedule_slots (slot INTEGER PRIMARY KEY, version INTEGER NOT NULL)",
)
_FILL_SLOTS: Final = (
    "INSERT OR IGNORE INTO schedule_slot_names (slot, name) SELECT schedule_slot(name), name FROM schedules",
    "DELETE FROM schedule_slot_names WHERE name NOT IN (SELECT name FROM schedules)",
    # A slot without a version is read as empty.
    "INSERT OR IGNORE INTO schedule_slots (slot, version) SELECT DISTINCT slot, 1 FROM schedule_slot_names",
)

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
_LIST_SLOT: Final = (
    f"SELECT {', '.join(f's.{c.strip()}' for c in _COLUMNS.split(','))} FROM schedule_slot_names n "
    "JOIN schedules s ON s.name = n.name WHERE n.slot = ? AND n.name >= ? ORDER BY n.name LIMIT ?"
)
_SLOT_NAME: Final = "INSERT OR IGNORE INTO schedule_slot_names (slot, name) VALUES (?, ?)"
_SLOT_UNNAME: Final = "DELETE FROM schedule_slot_names WHERE slot = ? AND name = ?"
_MAX_PARAMETERS: Final = 500
"""Slots asked in one statement (sqlite's oldest limit of bound parameters is 999)."""
_VERSIONS: Final = "SELECT slot, version FROM schedule_slots WHERE slot IN"
_BUMP: Final = (
    "INSERT INTO schedule_slots (slot, version) VALUES (?, 1) "
    "ON CONFLICT (slot) DO UPDATE SET version = version + 1"
)


def fill_slots(conn: sqlite3.Connection) -> None:
    """Files every schedule under its slot (those an older version added) and drops the names of those
    it deleted; in the opening transaction."""
    conn.create_function("schedule_slot", 1, schedule_slot, deterministic=True)
    for statement in _FILL_SLOTS:
        conn.execute(statement)


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
            if worker.conn.execute(_ADD, row).rowcount != 1:
                return False
            worker.conn.execute(_SLOT_NAME, (schedule_slot(record.name), record.name))
            worker.conn.execute(_BUMP, (schedule_slot(record.name),))
            return True

        return await self._submit(job)

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        row = (*_definition(record), record.name)

        def job(worker: Worker) -> bool:
            if worker.conn.execute(_UPDATE, row).rowcount != 1:
                return False
            worker.conn.execute(_BUMP, (schedule_slot(record.name),))
            return True

        return await self._submit(job)

    async def delete_schedule(self, name: str) -> bool:
        def job(worker: Worker) -> bool:
            if worker.conn.execute(_DELETE, (name,)).rowcount != 1:
                return False
            worker.conn.execute(_SLOT_UNNAME, (schedule_slot(name), name))
            worker.conn.execute(_BUMP, (schedule_slot(name),))
            return True

        return await self._submit(job)

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        def job(worker: Worker) -> list[ScheduleRecord]:
            return [_record(r) for r in worker.conn.execute(_LIST, (pivot, limit))]

        return await self._submit(job)

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        def job(worker: Worker) -> list[ScheduleRecord]:
            return [_record(r) for r in worker.conn.execute(_LIST_SLOT, (slot, pivot, limit))]

        return await self._submit(job)

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        wanted = list(slots)

        def job(worker: Worker) -> dict[int, str]:
            found: dict[int, str] = {}
            for start in range(0, len(wanted), _MAX_PARAMETERS):
                chunk = wanted[start : start + _MAX_PARAMETERS]
                query = f"{_VERSIONS} ({', '.join('?' * len(chunk))})"
                found.update((slot, str(version)) for slot, version in worker.conn.execute(query, chunk))
            return found

        return await self._submit(job)

    async def record_tick(self, name: str, tick: int) -> None:
        def job(worker: Worker) -> None:
            worker.conn.execute(_TICK, (tick, name))

        await self._submit(job)
