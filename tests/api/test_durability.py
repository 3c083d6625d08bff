"""A restarted node on durable storage (sqlite, PostgreSQL) finds everything: queued, leased (leases still
expire), scheduled (still due)."""

from __future__ import annotations

import pytest

from querator.clock import FakeClock
from tests.conftest import POSTGRES, ServerFactory, eventually

from .test_queue import ts


@pytest.fixture(params=["sqlite", POSTGRES])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_restart_keeps_queued_leased_and_scheduled(start_server: ServerFactory) -> None:
    clock = FakeClock()
    first = await start_server(clock, data="restart")
    await first.create("dead")
    await first.create("q", lease_timeout="10s", max_attempts=5, dead_queue="dead", requested_partitions=2)
    await first.produce_n("q", 30, "queued")
    leased = await first.lease("q", batch_size=5)
    await first.produce("q", [{"utf8": "later", "enqueue_at": ts(clock, 60)}])
    done = await first.lease("q", batch_size=3, client_id="c2")
    await first.complete("q", done.get("partition", 0), [i["id"] for i in done["items"]])
    await first.service.shutdown()

    second = await start_server(clock, data="restart")
    info = await second.post("/v1/queues.info", {"queue_name": "q"})
    assert (info["dead_queue"], info["max_attempts"], info["requested_partitions"]) == ("dead", 5, 2)
    stats = await second.stats("q")
    partitions = stats["logicalQueues"][0]["partitions"]
    assert sum(p.get("total", 0) for p in partitions) == 27
    assert sum(p.get("total_leased", 0) for p in partitions) == 5
    assert sum(p.get("scheduled", 0) for p in partitions) == 1
    # The leased items keep their ids and can still be completed after the restart...
    part = leased.get("partition", 0)
    await second.complete("q", part, [leased["items"][0]["id"]])
    # ...and the rest expire back into the queue; the scheduled item comes due.
    clock.advance(61)

    async def settled() -> bool:
        ps = (await second.stats("q"))["logicalQueues"][0]["partitions"]
        return (
            sum(p.get("total_leased", 0) for p in ps),
            sum(p.get("scheduled", 0) for p in ps),
            sum(p.get("total", 0) for p in ps),
        ) == (0, 0, 27)

    await eventually(settled)
    got = 0
    for _ in range(10):
        reply = await second.lease("q", batch_size=100, client_id="drain")
        got += len(reply["items"])
        await second.complete("q", reply.get("partition", 0), [i["id"] for i in reply["items"]])
        if got == 27:
            break
    assert got == 27


async def test_dedup_ids_survive_a_restart(start_server: ServerFactory) -> None:
    clock = FakeClock()
    first = await start_server(clock, data="dedup")
    await first.create("q", requested_partitions=3)
    await first.produce("q", [{"utf8": "a", "dedup_id": "x"}])
    await first.service.shutdown()
    second = await start_server(clock, data="dedup")
    for _ in range(3):
        await second.produce("q", [{"utf8": "a", "dedup_id": "x"}])
    stats = await second.stats("q")
    assert sum(p.get("total", 0) for p in stats["logicalQueues"][0]["partitions"]) == 1
