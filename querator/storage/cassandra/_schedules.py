"""Schedules in the keyspace (``ScheduleStore``): a row each in ``schedules``, their names in
``schedule_names`` for listing in name order (all of them in one partition, and each slot's in one of
its own), and each slot's version in ``schedule_versions``.

Every write of a schedule row is a lightweight transaction, as queue records' are: mixing them with
plain writes on one row would order the writes by two clocks. ``record_tick``'s condition
(``last_tick < ?``) is what makes the last tick only move forward when two nodes fire the same schedule
during an ownership change. The statements are prepared on first use, here, to keep them out of the
partitions' registry.

A slot's version is a plain write of a new ``timeuuid`` after the schedule's row: no read, no
lightweight transaction, and a member checking its slots reads one row per slot (docs/adr/0041).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from querator.storage.schedules import ScheduleRecord, schedule_slot

if TYPE_CHECKING:
    from cassandra.query import PreparedStatement

    from querator.storage.cassandra._session import Connection, Cql

TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS {ks}.schedules (
        name text PRIMARY KEY, cron text, time_zone text, queue text, catch_up text, catch_up_limit int,
        jitter bigint, paused boolean, start bigint, last_tick bigint, payload blob, encoding text,
        kind text, reference text, created_at bigint, updated_at bigint)""",
    # One partition holding every name, sorted: listing is a range read of it (``queues_by_namespace``).
    """CREATE TABLE IF NOT EXISTS {ks}.schedule_names (
        scope text, name text, PRIMARY KEY ((scope), name))""",
    # Written without a condition: a version only has to differ from the one read before. One partition:
    # a member reads its slots' versions every 5 s in one read (a single node, all 1024, in a few), and
    # it is written only when a schedule changes.
    """CREATE TABLE IF NOT EXISTS {ks}.schedule_versions (
        scope text, slot int, version timeuuid, PRIMARY KEY ((scope), slot))""",
)

_SCOPE = "all"
"""The one partition of ``schedule_names`` (a partition key may not be empty)."""
_DEFINITION = (
    "cron, time_zone, queue, catch_up, catch_up_limit, jitter, paused, start, payload, encoding, kind, "
    "reference, created_at, updated_at"
)
_COLUMNS = f"name, {_DEFINITION}, last_tick"
_GET: Final = f"SELECT {_COLUMNS} FROM {{ks}}.schedules WHERE name = ?"
_ADD: Final = f"INSERT INTO {{ks}}.schedules ({_COLUMNS}) VALUES ({', '.join('?' * 16)}) IF NOT EXISTS"
_UPDATE: Final = (
    "UPDATE {ks}.schedules SET "
    + ", ".join(f"{column.strip()} = ?" for column in _DEFINITION.split(","))
    + " WHERE name = ? IF EXISTS"
)
_DELETE: Final = "DELETE FROM {ks}.schedules WHERE name = ? IF EXISTS"
_TICK: Final = "UPDATE {ks}.schedules SET last_tick = ? WHERE name = ? IF last_tick < ?"
_INDEX: Final = "INSERT INTO {ks}.schedule_names (scope, name) VALUES (?, ?)"
_UNINDEX: Final = "DELETE FROM {ks}.schedule_names WHERE scope = ? AND name = ?"
_LIST: Final = "SELECT name FROM {ks}.schedule_names WHERE scope = ? AND name >= ? LIMIT ?"
_GET_MANY: Final = f"SELECT {_COLUMNS} FROM {{ks}}.schedules WHERE name IN ?"
_BUMP: Final = "UPDATE {ks}.schedule_versions SET version = now() WHERE scope = ? AND slot = ?"
_VERSIONS: Final = "SELECT slot, version FROM {ks}.schedule_versions WHERE scope = ? AND slot IN ?"
_VERSIONS_READ: Final = 256
"""Slots one statement reads (rows of one ``IN``): a member of a cluster owns a few dozen."""
_FILLED: Final = "schedule_slots"
"""The ``schema_version`` row saying the slots' names were filled from ``schedule_names``."""


def _slot_scope(slot: int) -> str:
    """The ``schedule_names`` partition of one slot (never ``_SCOPE``)."""
    return f"slot:{slot}"


def fill_slots(session: Any, ks: str) -> None:
    """Files the schedules of a keyspace written before slots under their slots, once (blocking).
    Idempotent: a start cut short does it all again."""
    if session.execute(f"SELECT version FROM {ks}.schema_version WHERE name = '{_FILLED}'").one():
        return
    index = session.prepare(_INDEX.replace("{ks}", ks))
    slots = set()
    for row in session.execute(f"SELECT name FROM {ks}.schedule_names WHERE scope = '{_SCOPE}'"):
        slots.add(slot := schedule_slot(row["name"]))
        session.execute(index, (_slot_scope(slot), row["name"]))
    bump = session.prepare(_BUMP.replace("{ks}", ks))
    for slot in slots:  # a slot without a version is read as empty
        session.execute(bump, (_SCOPE, slot))
    session.execute(f"INSERT INTO {ks}.schema_version (name, version) VALUES ('{_FILLED}', 1)")


def _definition(r: ScheduleRecord) -> tuple[Any, ...]:
    return (
        r.cron, r.time_zone, r.queue, r.catch_up, r.catch_up_limit, r.jitter, r.paused, r.start,
        r.payload, r.encoding, r.kind, r.reference, r.created_at, r.updated_at,
    )  # fmt: skip


def _record(row: dict[str, Any]) -> ScheduleRecord:
    return ScheduleRecord(
        name=row["name"],
        cron=row["cron"] or "",
        time_zone=row["time_zone"] or "",
        queue=row["queue"] or "",
        catch_up=row["catch_up"] or "",
        catch_up_limit=row["catch_up_limit"] or 0,
        jitter=row["jitter"] or 0,
        paused=bool(row["paused"]),
        start=row["start"] or 0,
        last_tick=row["last_tick"] or 0,
        payload=row["payload"] or b"",
        encoding=row["encoding"] or "",
        kind=row["kind"] or "",
        reference=row["reference"] or "",
        created_at=row["created_at"] or 0,
        updated_at=row["updated_at"] or 0,
    )


class CassandraSchedules:
    """The ``ScheduleStore`` methods of ``CassandraStore``."""

    if TYPE_CHECKING:
        _connection: Connection

    _prepared: tuple[Cql, dict[str, PreparedStatement]] | None = None

    def _statement(self, cql: Cql, text: str) -> PreparedStatement:
        """``text`` prepared on ``cql``'s session (once per session; worker threads only)."""
        if self._prepared is None or self._prepared[0] is not cql:
            self._prepared = (cql, {})
        cache = self._prepared[1]
        prepared = cache.get(text)
        if prepared is None:
            prepared = cache[text] = cql.session.prepare(text.replace("{ks}", cql.keyspace))
        return prepared

    def _rows(self, cql: Cql, text: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        return cql.rows_statement(self._statement(cql, text).bind(params))

    def _applied(self, cql: Cql, text: str, params: tuple[Any, ...]) -> bool:
        return cql.applied_statement(self._statement(cql, text).bind(params))[0]

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        rows = await self._connection.call(lambda cql: self._rows(cql, _GET, (name,)))
        return _record(rows[0]) if rows else None

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        def add(cql: Cql) -> bool:
            applied = self._applied(cql, _ADD, (record.name, *_definition(record), record.last_tick))
            if applied:
                self._rows(cql, _INDEX, (_SCOPE, record.name))
                self._rows(cql, _INDEX, (_slot_scope(schedule_slot(record.name)), record.name))
                self._rows(cql, _BUMP, (_SCOPE, schedule_slot(record.name)))
            return applied

        return await self._connection.call(add, writes=True)

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        def update(cql: Cql) -> bool:
            applied = self._applied(cql, _UPDATE, (*_definition(record), record.name))
            if applied:
                self._rows(cql, _BUMP, (_SCOPE, schedule_slot(record.name)))
            return applied

        return await self._connection.call(update, writes=True)

    async def delete_schedule(self, name: str) -> bool:
        def delete(cql: Cql) -> bool:
            applied = self._applied(cql, _DELETE, (name,))
            # Unindexed either way: a name left by a delete that failed half-way must not stay listed.
            self._rows(cql, _UNINDEX, (_SCOPE, name))
            self._rows(cql, _UNINDEX, (_slot_scope(schedule_slot(name)), name))
            self._rows(cql, _BUMP, (_SCOPE, schedule_slot(name)))
            return applied

        return await self._connection.call(delete, writes=True)

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        def list_(cql: Cql) -> list[ScheduleRecord]:
            names = [r["name"] for r in self._rows(cql, _LIST, (_SCOPE, pivot, limit))]
            records = []
            for name in names:
                rows = self._rows(cql, _GET, (name,))
                if rows:
                    records.append(_record(rows[0]))
            return records

        return await self._connection.call(list_)

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        def list_(cql: Cql) -> list[ScheduleRecord]:
            names = [r["name"] for r in self._rows(cql, _LIST, (_slot_scope(slot), pivot, limit))]
            if not names:
                return []
            found = {r.name: r for r in map(_record, self._rows(cql, _GET_MANY, (names,)))}
            return [found[name] for name in names if name in found]

        return await self._connection.call(list_)

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        wanted = list(slots)

        def versions(cql: Cql) -> dict[int, str]:
            found: dict[int, str] = {}
            for start in range(0, len(wanted), _VERSIONS_READ):
                rows = self._rows(cql, _VERSIONS, (_SCOPE, wanted[start : start + _VERSIONS_READ]))
                found.update((r["slot"], str(r["version"])) for r in rows if r["version"] is not None)
            return found

        return await self._connection.call(versions) if wanted else {}

    async def record_tick(self, name: str, tick: int) -> None:
        await self._connection.call(lambda cql: self._applied(cql, _TICK, (tick, name, tick)), writes=True)
