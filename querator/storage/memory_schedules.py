"""The memory backend's schedules (``ScheduleStore``): records in a dict, copied in and out so that a
caller's later changes never reach the store."""

from __future__ import annotations

import dataclasses

from querator.storage.schedules import ScheduleRecord


class MemorySchedules:
    """Schedules in process memory; mixed into ``MemoryStore``."""

    def __init__(self) -> None:
        super().__init__()  # the other mixins of MemoryStore
        self._schedules: dict[str, ScheduleRecord] = {}

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        record = self._schedules.get(name)
        return dataclasses.replace(record) if record is not None else None

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        if record.name in self._schedules:
            return False
        self._schedules[record.name] = dataclasses.replace(record)
        return True

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        current = self._schedules.get(record.name)
        if current is None:
            return False
        self._schedules[record.name] = dataclasses.replace(record, last_tick=current.last_tick)
        return True

    async def delete_schedule(self, name: str) -> bool:
        return self._schedules.pop(name, None) is not None

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        names = sorted(n for n in self._schedules if n >= pivot)[:limit]
        return [dataclasses.replace(self._schedules[n]) for n in names]

    async def record_tick(self, name: str, tick: int) -> None:
        record = self._schedules.get(name)
        if record is not None and tick > record.last_tick:
            record.last_tick = tick
