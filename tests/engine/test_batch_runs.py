"""What the logical queue counts of its storage runs (exported by /metrics): runs, and the requests each
answered (the requests merged into one run)."""

from __future__ import annotations

import asyncio

from querator.clock import MICROS, FakeClock
from querator.engine.logical_queue import LogicalQueue
from querator.engine.run_bytes import RUN_PAYLOAD_BYTES, split_by_payload
from querator.storage.base import Item
from querator.storage.memory import MemoryPartition
from tests.conftest import eventually
from tests.engine.test_engine_faults import MINUTE, Settings, no_dead_queue, record


async def test_requests_waiting_together_share_one_run_per_partition() -> None:
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(lq.call(hold.wait))  # the loop is busy: the produces wait together
    produces = [asyncio.ensure_future(lq.produce([Item(payload=b"x")], MINUTE)) for _ in range(3)]

    async def queued() -> bool:
        return len(lq._waiting.pending) == 3

    await eventually(queued)
    hold.set()
    await blocker
    await asyncio.gather(*produces)
    assert (lq.counters.batch_runs, lq.counters.batch_run_requests) == (1, 3)
    _, items = await lq.lease("c", 3, MICROS)  # alone: a run of its own
    await lq.complete(0, [i.id for i in items])
    assert (lq.counters.batch_runs, lq.counters.batch_run_requests) == (3, 5)
    await lq.shutdown()


async def test_produces_waiting_together_share_a_run_up_to_its_payload_bytes() -> None:
    """Cassandra refuses a request over 16 MiB: produces merged into one run carry at most
    ``RUN_PAYLOAD_BYTES`` of payload together, and the rest go in the next run (a lone produce may carry
    more)."""
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    hold = asyncio.Event()
    blocker = asyncio.ensure_future(lq.call(hold.wait))
    half = RUN_PAYLOAD_BYTES // 2
    sizes = [half, half, 1, RUN_PAYLOAD_BYTES + 1]
    produces = [asyncio.ensure_future(lq.produce([Item(payload=b"x" * n)], MINUTE)) for n in sizes]

    async def queued() -> bool:
        return len(lq._waiting.pending) == len(sizes)

    await eventually(queued)
    hold.set()
    await blocker
    await asyncio.gather(*produces)
    # [half, half], then [1] (with it the first run would pass the bound), then the large one alone.
    assert (lq.counters.batch_runs, lq.counters.batch_run_requests) == (3, 4)
    await lq.shutdown()


def test_items_split_by_payload_keep_their_order_and_a_large_one_goes_alone() -> None:
    parts = split_by_payload([Item(payload=b"x" * n) for n in (3, 4, 9, 1, 2, 5)], 8)
    assert [[len(i.payload) for i in part] for part in parts] == [[3, 4], [9], [1, 2, 5]]
    assert split_by_payload(list[Item](), 8) == [[]]
