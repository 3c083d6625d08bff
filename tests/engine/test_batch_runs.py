"""What the logical queue counts of its storage runs (exported by /metrics): runs, and the requests each
answered (the requests merged into one run)."""

from __future__ import annotations

import asyncio

from querator.clock import MICROS, FakeClock
from querator.engine.logical_queue import LogicalQueue
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
