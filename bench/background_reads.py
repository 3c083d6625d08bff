"""What one member's background work reads and writes, counted (docs/adr/0041; recorded in
docs/benchmarks-log.md, "Background work per member"): the scheduler of one member of a cluster of
``--members`` over ``--schedules`` schedules for a minute of a FakeClock, and one flush of the last use
of ``--keys`` API keys. Counts calls into the store (memory), not time, so the figures do not depend on
the machine; it runs on a tree before ADR 0041 too, for the comparison.

    python bench/background_reads.py --schedules 10000 --members 80 --keys 1000
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from querator.auth import generate_key
from querator.clock import MICROS, FakeClock
from querator.cluster.ring import Ring
from querator.schedules import Scheduler
from querator.storage.memory import MemoryStore
from querator.storage.schedules import ScheduleRecord
from querator.tenancy._access import Access, hash_key
from querator.tenancy._directory import Directory
from querator.tenancy._model import ApiKey, User

START = 1_767_268_800 * MICROS  # 2026-01-01 12:00 UTC


class Counting(MemoryStore):
    """Counts every call into the store by name, and the schedule records it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.records = 0
        self.counting = False

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name.startswith("_") or not callable(found) or not super().__getattribute__("counting"):
            return found

        async def counted(*args: Any) -> Any:
            self.calls[name] += 1
            result = await found(*args)
            if name in ("list_schedules", "list_slot_schedules"):
                self.records += len(result)
            return result

        return counted


async def schedules(count: int, members: int) -> None:
    store = Counting()
    for n in range(count):
        await store.add_schedule(ScheduleRecord(name=f"s{n:05}", cron="15 3 * * *", queue="q", start=START))
    ring = Ring([f"node-{n:02}" for n in range(members)], 1)
    clock = FakeClock(START)

    async def fire(record: ScheduleRecord, tick: int) -> None:
        pass

    if hasattr(store, "list_slot_schedules"):  # slots (ADR 0041)
        scheduler = Scheduler(store, clock, lambda slot: ring.schedule_slot_owner(slot) == "node-00", fire)
    else:
        scheduler = Scheduler(store, clock, lambda name: ring.schedule_owner(name) == "node-00", fire)  # type: ignore[arg-type]
    store.counting = True
    await scheduler.look()  # the start
    start_calls, start_records = sum(store.calls.values()), store.records
    for _ in range(60):  # a minute, a look each second
        clock.advance(1)
        await scheduler.look()
    minute_calls = sum(store.calls.values()) - start_calls
    minute_records = store.records - start_records
    print(
        f"schedules={count} members={members}: start {start_calls} store calls, {start_records} records; "
        f"then per minute {minute_calls} store calls, {minute_records} records ({dict(store.calls)})"
    )


async def keys(count: int) -> None:
    store = Counting()
    directory = Directory(store)
    access = Access(directory, FakeClock(START))
    await directory.add_user(User(id="u1", username="ann"))
    secrets = [generate_key() for _ in range(count)]
    for n, key in enumerate(secrets):
        await directory.add_key(ApiKey(id=f"k{n:05}", user_id="u1", key_hash=hash_key(key), prefix=key[:8]))
    for key in secrets:
        await access.authenticate(f"Bearer {key}")
    store.counting = True
    await access.flush()
    print(f"keys={count}: one flush, {sum(store.calls.values())} store calls ({dict(store.calls)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--members", type=int, default=80)
    parser.add_argument("--keys", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(schedules(args.schedules, args.members))
    asyncio.run(schedules(args.schedules, 1))
    asyncio.run(keys(args.keys))


if __name__ == "__main__":
    main()
