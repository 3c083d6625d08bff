"""The storage contract of cron schedules (docs/schedules.md): their records and what a backend does with
them. Every ``Store`` is also a ``ScheduleStore``.

A schedule's definition and its ``last_tick`` are written separately: an update replaces the definition
and keeps the last tick, and ``record_tick`` only ever moves the last tick forward, so a node that fires
a tick late (a takeover, a slow produce) can never make an earlier tick due again. The rules of which
ticks are due live in ``querator.schedules`` (pure code); a backend only stores rows.

Schedules are grouped into ``SLOTS`` slots by a hash of their name (``schedule_slot``): the ring gives
each slot to one member, which reads only its slots' schedules, and learns of a change by the slot's
version (``slot_versions``), never by reading every schedule again (docs/adr/0041).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

SLOTS: Final = 1024
"""Slots of schedules: enough for a few dozen per member in a cluster of 80 (the ring's spread), few
enough that a member checks its slots' versions in one small read."""


def schedule_slot(name: str) -> int:
    """The slot of the schedule ``name``: the same on every member and in every version."""
    return zlib.crc32(name.encode()) % SLOTS


@dataclass(slots=True)
class ScheduleRecord:
    """A schedule as stored. Times are microseconds since the epoch, durations microseconds."""

    name: str
    cron: str = ""
    time_zone: str = "UTC"
    queue: str = ""
    catch_up: str = "one"
    """What happens to ticks missed while nobody could fire them: ``skip``, ``one`` or ``all``."""
    catch_up_limit: int = 0
    """``all`` fires at most this many of the missed ticks (the newest)."""
    jitter: int = 0
    """Each tick fires up to this long after its time, by a delay fixed per tick."""
    paused: bool = False
    start: int = 0
    """Only ticks after this time fire: set at creation, at a resume and when the calendar changes."""
    last_tick: int = 0
    """The latest tick dealt with (fired, or passed over by the catch-up policy); 0 before the first."""
    payload: bytes = b""
    encoding: str = ""
    kind: str = ""
    reference: str = ""
    created_at: int = 0
    updated_at: int = 0


class ScheduleStore(Protocol):
    """What a backend keeps of schedules."""

    async def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule, or None when it does not exist."""

    async def add_schedule(self, record: ScheduleRecord) -> bool:
        """Stores a new schedule (with its ``last_tick``); False (and no change) when the name is taken."""

    async def update_schedule(self, record: ScheduleRecord) -> bool:
        """Replaces an existing schedule's definition, keeping its stored ``last_tick``; False (and no
        change) when it does not exist."""

    async def delete_schedule(self, name: str) -> bool:
        """Removes a schedule; False when it did not exist."""

    async def list_schedules(self, pivot: str, limit: int) -> list[ScheduleRecord]:
        """Schedules with ``name >= pivot``, sorted by name, at most ``limit``."""

    async def list_slot_schedules(self, slot: int, pivot: str, limit: int) -> list[ScheduleRecord]:
        """The schedules of ``slot`` (``schedule_slot``) with ``name >= pivot``, sorted by name, at most
        ``limit``."""

    async def slot_versions(self, slots: Sequence[int]) -> dict[int, str]:
        """A version per slot of ``slots`` that changes with every add, update and delete of a schedule
        in it, and is written after the schedule (so a version read before the slot's schedules is never
        newer than them); a slot absent holds no schedule (a reader need not list it). ``record_tick``
        changes no version."""

    async def record_tick(self, name: str, tick: int) -> None:
        """Raises the schedule's ``last_tick`` to ``tick``; a lower value, or a schedule that no longer
        exists, changes nothing."""
