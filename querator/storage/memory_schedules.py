"""The memory backend's schedules (``ScheduleStore``): records in a dict, copied in and out so that a
caller's later changes never reach the store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from querator.storage.schedules import ScheduleRecord, schedule_slot


class MemorySchedules:
    """Schedules in process memory; mixed into ``MemoryStore``."""

    def __init__(self) -> None:
        super().__init__()  # the other mixins of MemoryStore
        self._schedules: dict[str, ScheduleRecord] = {}
        self._slot_versions: dict[int, int] = {}

    def _bump(self, name: str) -> None:
        slot = schedule_slot(name)
        self._slot_versions[slot] = self._slot_versions.get(slot, 0) + 1

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        record = self._schedules.get(name)
        return dataclasses.replace(record) if record is not None else None

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        if record.name in self._schedules:
            return False
        self._schedules[record.name] = dataclasses.replace(record)
        self._bump(record.name)
        return True

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        current = self._schedules.get(record.name)
        if current is None:
            return False
        self._schedules[record.name] = dataclasses.replace(record, last_tick=current.last_tick)
        self._bump(record.name)
        return True

    async def delete_schedule(self, name: str) -> bool:
        if self._schedules.pop(name, None) is None:
            return False
        self._bump(name)
        return True

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        names = sorted(n for n in self._schedules if n >= pivot)[:limit]
        return [dataclasses.replace(self._schedules[n]) for n in names]

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        names = sorted(n for n in self._schedules if n >= pivot and schedule_slot(n) == slot)[:limit]
        return [dataclasses.replace(self._schedules[n]) for n in names]

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        return {s: str(self._slot_versions[s]) for s in slots if s in self._slot_versions}

    async def record_tick(self, name: str, tick: int) -> None:
        record = self._schedules.get(name)
        if record is not None and tick > record.last_tick:
            record.last_tick = tick
