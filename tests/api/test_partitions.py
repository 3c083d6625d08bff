"""Opportunistic distribution across partitions (docs/semantics.md §8.3, the reference's
partition_test.go)."""

from __future__ import annotations

import asyncio

import pytest

from querator.clock import MICROS, FakeClock
from querator.engine.distribution import FAIRNESS_US
from tests.conftest import Api, eventually


async def totals(api: Api, queue: str, key: str = "total") -> list[int]:
    stats = await api.stats(queue)
    return [p.get(key, 0) for p in stats["logicalQueues"][0]["partitions"]]


async def test_two_partitions(api: Api) -> None:
    await api.create("q", requested_partitions=2)
    await api.produce_n("q", 10)
    await api.produce_n("q", 11)
    assert await totals(api, "q") == [10, 11]
    await api.lease("q", batch_size=10, client_id="a")
    await api.lease("q", batch_size=10, client_id="b")
    assert sum(await totals(api, "q", "total_leased")) == 20


async def test_opportunistic_lease(api: Api) -> None:
    await api.create("q", requested_partitions=2)
    for _ in range(5):
        await api.produce_n("q", 10)
    assert await totals(api, "q") == [30, 20]
    for n in (5, 10, 20):
        await api.lease("q", batch_size=n, client_id=f"c{n}")
    assert await totals(api, "q", "total_leased") == [15, 20]


async def test_a_partition_left_behind_is_not_starved(api: Api, clock: FakeClock) -> None:
    # By the counts alone partition 0 would wait for as long as this goes on: each produce refills
    # partition 1 (the fewest items), each lease drains it (the most).
    await api.create("q", requested_partitions=2)
    await api.produce_n("q", 3)
    partitions = []
    for n in range(2):
        clock.advance(0.6 * FAIRNESS_US / MICROS)
        await api.produce_n("q", 4)
        reply = await api.lease("q", batch_size=4, client_id=f"c{n}")
        partitions.append((reply.get("partition", 0), len(reply["items"])))
    # Partition 0's items had waited 0.6 then 1.2 times FAIRNESS_US longer than partition 1's.
    assert partitions == [(1, 4), (0, 3)]


@pytest.mark.one_process
async def test_many_partitions_one_consumer(api: Api) -> None:
    await api.create("q", requested_partitions=10)
    for _ in range(10):
        await api.produce_n("q", 5)
    assert await totals(api, "q") == [5] * 10
    seen = set()
    for _ in range(10):
        reply = await api.lease("q", batch_size=5)
        assert len(reply["items"]) == 5
        seen.add(reply.get("partition", 0))
        await api.complete("q", reply.get("partition", 0), [i["id"] for i in reply["items"]])
    assert seen == set(range(10))
    assert sum(await totals(api, "q")) == 0


async def test_one_partition_many_consumers(api: Api) -> None:
    await api.create("q")
    await api.produce_n("q", 50)
    got = 0
    for _ in range(5):
        replies = await asyncio.gather(*(api.lease("q", batch_size=2, client_id=f"c{i}") for i in range(5)))
        for r in replies:
            got += len(r["items"])
            await api.complete("q", 0, [i["id"] for i in r["items"]])
    assert got == 50


async def test_waiting_consumers_share_one_produce(live_api: Api) -> None:
    await live_api.create("q", requested_partitions=5)
    waiting = [
        asyncio.ensure_future(live_api.lease("q", batch_size=10, client_id=f"c{i}", timeout="10s"))
        for i in range(5)
    ]

    async def parked() -> bool:
        return await live_api.lease_waiting("q") == 5

    await eventually(parked)
    await live_api.produce_n("q", 10)
    assert [len((await w)["items"]) for w in waiting] == [2] * 5
