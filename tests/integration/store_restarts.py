"""The restart and fencing scenarios every external store passes (tests/integration/test_cassandra.py and
test_postgres.py run them with their store's arguments and its node's stop and start):

- SIGKILL of Querator keeps queued, leased and scheduled items (the leases still expire afterwards).
- The store stopped and started again under load: no acknowledged item is lost, requests during the
  outage get 454 (never 500), and the same Querator process serves again once the store is back.
- Two Querator processes on one store: the later one claims the partition with a newer epoch, and the
  earlier one's writes are refused (454) from then on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from querator.client import AsyncClient
from querator.errors import RetryRequest
from querator.wire import messages as m

from .conftest import Held, Servers, eventually, held, keep_producing, kill9
from .test_crash import DEADLINE, drain

PRODUCERS = 4


async def restart_keeps_items_leases_and_scheduled(servers: Servers, args: tuple[str, ...]) -> None:
    server = await servers.astart(*args)
    queued = [f"queued-{i}" for i in range(10)]
    scheduled = ["scheduled-0", "scheduled-1"]
    async with AsyncClient(server.url) as client:
        # Leases and delays long enough to outlast a restart on a loaded machine, so they are still
        # leased and scheduled when the restarted node counts them.
        await client.create_queue("work", lease_timeout="10s", expire_timeout="1h", partitions=2)
        await client.produce("work", queued)
        lease = await client.lease("work", batch_size=4, client_id="doomed", request_timeout="5s")
        leased = [i.bytes.decode() for i in lease.items]
        enqueue_at = datetime.now(UTC) + timedelta(seconds=12)
        await client.produce("work", [m.QueueProduceItem(utf8=p, enqueue_at=enqueue_at) for p in scheduled])
    kill9(server)

    restarted = await servers.astart(*args)
    async with AsyncClient(restarted.url) as client:
        totals = await held(client, "work")
        assert totals == Held(len(queued), len(leased), len(scheduled)), restarted.describe()
        delivered = await drain(client, restarted, "work", until=len(queued) + len(scheduled))
        assert await held(client, "work") == Held()
    payloads = [i.bytes.decode() for _, i in delivered]
    assert Counter(payloads) == Counter(queued + scheduled)
    attempts = {i.bytes.decode(): i.attempts for _, i in delivered}
    assert attempts == {p: 2 if p in leased else 1 for p in queued + scheduled}


async def store_restart_under_load_loses_nothing(
    servers: Servers, args: tuple[str, ...], stop_store: Callable[[], None], start_store: Callable[[], None]
) -> None:
    server = await servers.astart(*args)
    acked: set[str] = set()
    codes: Counter[int] = Counter()
    stop = asyncio.Event()
    async with AsyncClient(server.url) as client:
        await client.create_queue("load", lease_timeout="1m", expire_timeout="1h", partitions=2)

        producers = [
            asyncio.create_task(keep_producing(client, "load", n, 5, acked, codes, stop))
            for n in range(PRODUCERS)
        ]
        await eventually(lambda: _true(len(acked) >= 200), DEADLINE, "items acknowledged before the outage")
        await asyncio.to_thread(stop_store)
        before = codes[454]
        try:
            await eventually(lambda: _true(codes[454] > before), DEADLINE, "454 during the outage")
            with pytest.raises(RetryRequest):  # queue metadata comes from the store too
                await client.list_queues()
        finally:
            await asyncio.to_thread(start_store)
        recovered = codes[200]
        await eventually(lambda: _true(codes[200] > recovered + 20), 90, "produce works again")
        stop.set()
        await asyncio.gather(*producers)
        assert set(codes) <= {200, 454}, codes
        delivered = await drain(client, server, "load")
    assert server.running(), "Querator was not restarted"
    missing = acked - {i.bytes.decode() for _, i in delivered}
    assert missing == set(), f"{len(missing)} acknowledged items lost: {sorted(missing)[:10]}"


async def _true(value: bool) -> bool:
    return value


async def a_second_node_fences_the_first(servers: Servers, args: tuple[str, ...]) -> None:
    first = await servers.astart(*args)
    async with AsyncClient(first.url) as a:
        await a.create_queue("shared", lease_timeout="1m", expire_timeout="1h", partitions=1)
        await a.produce("shared", ["from-first"])
        second = await servers.astart(*args)  # a later start is a newer epoch
        async with AsyncClient(second.url) as b:
            await b.produce("shared", ["from-second"])  # claims the partition
            for _ in range(2):  # refused, and it stays refused: the first node stopped serving it
                with pytest.raises(RetryRequest):
                    await a.produce("shared", ["lost"], request_timeout="2s")
            reply = await b.lease("shared", batch_size=10, client_id="c", request_timeout="5s")
            assert [i.bytes.decode() for i in reply.items] == ["from-first", "from-second"]
    assert "stale owner" in first.stderr()
