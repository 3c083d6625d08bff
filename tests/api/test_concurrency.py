"""Several producers and consumers at once: every item is leased exactly once and completed."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.conftest import ApiError, ServerFactory

PRODUCERS = 4
CONSUMERS = 4
PER_PRODUCER = 500


async def test_no_loss_no_duplicate(start_server: ServerFactory) -> None:
    api = await start_server()
    await api.create("q", requested_partitions=3)
    delivered: Counter[str] = Counter()
    produced = asyncio.Event()

    async def producer(n: int) -> None:
        for start in range(0, PER_PRODUCER, 50):
            await api.produce("q", [{"utf8": f"p{n}-{i}"} for i in range(start, start + 50)])

    async def consumer(n: int) -> None:
        while True:
            try:
                reply = await api.lease("q", batch_size=37, client_id=f"consumer-{n}", timeout="200ms")
            except ApiError as e:
                assert e.status == 454
                if produced.is_set():
                    return
                continue
            for item in reply["items"]:
                delivered[item["bytes"]] += 1
            await api.complete("q", reply.get("partition", 0), [i["id"] for i in reply["items"]])

    consumers = [asyncio.ensure_future(consumer(n)) for n in range(CONSUMERS)]
    await asyncio.gather(*(producer(n) for n in range(PRODUCERS)))
    produced.set()
    await asyncio.gather(*consumers)
    assert len(delivered) == PRODUCERS * PER_PRODUCER
    assert set(delivered.values()) == {1}
    stats = (await api.stats("q"))["logicalQueues"][0]["partitions"]
    assert sum(p.get("total", 0) for p in stats) == 0
