"""The schedule part of the storage contract (``querator.storage.schedules``), mixed into
``StoreContract`` so every backend runs it."""

from __future__ import annotations

import dataclasses

from querator.storage.base import Store
from querator.storage.schedules import SLOTS, ScheduleRecord, schedule_slot

SECOND = 1_000_000
NOW = 1_700_000_000 * SECOND


def schedule(name: str, **fields: object) -> ScheduleRecord:
    record = ScheduleRecord(
        name=name, cron="*/5 * * * *", time_zone="Europe/Berlin", queue="jobs", catch_up="all",
        catch_up_limit=10, jitter=3 * SECOND, start=NOW, payload=b"\x00{\"a\": 1}\xff",
        encoding="application/json", kind="report", reference="ref-ü", created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    return dataclasses.replace(record, **fields)  # type: ignore[arg-type]


class ScheduleContract:
    async def test_schedule_records_round_trip(self, store: Store) -> None:
        assert await store.get_schedule("nightly") is None
        record = schedule("nightly", paused=True, last_tick=NOW - SECOND)
        assert await store.add_schedule(record) is True
        assert await store.get_schedule("nightly") == record
        assert await store.add_schedule(schedule("nightly", cron="* * * * *")) is False
        assert await store.get_schedule("nightly") == record

    async def test_update_replaces_the_definition_and_keeps_the_last_tick(self, store: Store) -> None:
        assert await store.update_schedule(schedule("absent")) is False
        assert await store.get_schedule("absent") is None
        await store.add_schedule(schedule("s"))
        await store.record_tick("s", NOW + 60 * SECOND)
        changed = schedule("s", cron="0 3 * * *", time_zone="UTC", paused=True, payload=b"", last_tick=1)
        assert await store.update_schedule(changed) is True
        assert await store.get_schedule("s") == dataclasses.replace(changed, last_tick=NOW + 60 * SECOND)

    async def test_the_last_tick_only_moves_forward(self, store: Store) -> None:
        await store.add_schedule(schedule("s"))
        await store.record_tick("s", NOW + 10 * SECOND)
        await store.record_tick("s", NOW + 5 * SECOND)
        found = await store.get_schedule("s")
        assert found is not None and found.last_tick == NOW + 10 * SECOND
        await store.record_tick("s", NOW + 20 * SECOND)
        found = await store.get_schedule("s")
        assert found is not None and found.last_tick == NOW + 20 * SECOND

    async def test_a_tick_of_a_deleted_schedule_is_not_stored(self, store: Store) -> None:
        await store.add_schedule(schedule("s"))
        assert await store.delete_schedule("s") is True
        assert await store.delete_schedule("s") is False
        await store.record_tick("s", NOW)
        assert await store.get_schedule("s") is None
        assert await store.list_schedules("", 10) == []
        assert await store.add_schedule(schedule("s")) is True
        assert await store.get_schedule("s") == schedule("s")

    async def test_list_schedules_sorts_then_limits(self, store: Store) -> None:
        for name in ["b", "a", "d", "c"]:
            assert await store.add_schedule(schedule(name))

        async def names(pivot: str, limit: int) -> list[str]:
            return [r.name for r in await store.list_schedules(pivot, limit)]

        assert await names("", 10) == ["a", "b", "c", "d"]
        assert await names("b", 10) == ["b", "c", "d"]
        assert await names("bb", 2) == ["c", "d"]
        assert await names("", 2) == ["a", "b"]
        assert await names("z", 10) == []
        assert (await store.list_schedules("d", 1))[0] == schedule("d")

    async def test_a_slot_lists_its_schedules_and_changes_version_with_them(self, store: Store) -> None:
        """docs/adr/0041: a member reads only its slots, and learns of a change by a slot's version."""
        slot = schedule_slot("s0")
        in_slot = sorted(n for n in (f"s{n}" for n in range(5 * SLOTS)) if schedule_slot(n) == slot)[:3]
        names = [*in_slot, *(t for t in (f"t{n}" for n in range(20)) if schedule_slot(t) != slot)]
        for name in names:
            assert await store.add_schedule(schedule(name))
        by_slot = {schedule_slot(name) for name in names}
        assert len(in_slot) == 3
        assert [r.name for r in await store.list_slot_schedules(slot, "", 100)] == in_slot
        assert [r.name for r in await store.list_slot_schedules(slot, in_slot[1], 1)] == [in_slot[1]]
        assert (await store.list_slot_schedules(slot, "", 1))[0] == schedule(in_slot[0])
        other = next(s for s in range(SLOTS) if s not in by_slot)
        assert await store.list_slot_schedules(other, "", 100) == []

        versions = await store.slot_versions([slot, other])
        assert versions.get(other, "") == ""
        seen = [versions[slot]]
        await store.record_tick(in_slot[0], NOW + SECOND)  # the owner's own write: no version
        assert (await store.slot_versions([slot]))[slot] == seen[-1]
        assert await store.update_schedule(schedule(in_slot[0], cron="0 3 * * *"))
        seen.append((await store.slot_versions([slot]))[slot])
        assert await store.delete_schedule(in_slot[1])
        seen.append((await store.slot_versions([slot]))[slot])
        assert await store.add_schedule(schedule(in_slot[1]))
        seen.append((await store.slot_versions([slot]))[slot])
        assert len(set(seen)) == 4
        assert await store.update_schedule(schedule("absent")) is False
        assert await store.delete_schedule("absent") is False
        assert (await store.slot_versions([slot]))[slot] == seen[-1]
        assert await store.slot_versions([]) == {}
        assert await store.delete_schedule(in_slot[1])
        assert in_slot[1] not in [r.name for r in await store.list_slot_schedules(slot, "", 100)]
