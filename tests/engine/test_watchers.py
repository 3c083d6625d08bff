"""``LogicalQueue.until_items``: the watch another member's waiting leases keep on this owner (ADR 0042).
It is answered once the partitions hold items a lease could take, after this node's own parked leases
had their turn, and leases nothing. FakeClock, memory partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from querator.clock import MICROS, FakeClock
from querator.engine.logical_queue import LogicalQueue
from querator.errors import QueratorError, RetryRequest
from querator.storage.base import Item
from querator.storage.memory import MemoryPartition
from tests.conftest import eventually
from tests.engine.test_engine_faults import MINUTE, Settings, no_dead_queue, record


def done(future: asyncio.Future[object]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return future.done()

    return check


async def test_a_watch_is_answered_by_a_produce_and_leases_nothing() -> None:
    clock = FakeClock()
    part = MemoryPartition()
    lq = LogicalQueue(Settings(record()), [(0, part)], clock, no_dead_queue)
    watch = asyncio.ensure_future(lq.until_items(MINUTE))
    await asyncio.sleep(0)
    assert not watch.done()
    await lq.produce([Item(payload=b"x")], MINUTE)
    await eventually(done(watch))
    assert watch.result() is True
    assert len(part.head(10)) == 1 and not part.leased  # still there for whoever leases it
    # Items there already: answered at once.
    assert await lq.until_items(MINUTE) is True
    await lq.shutdown()


async def test_a_parked_lease_here_takes_the_item_before_a_watch_hears_of_it() -> None:
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    lease = asyncio.ensure_future(lq.lease("c", 1, 10 * MINUTE))
    watch = asyncio.ensure_future(lq.until_items(10 * MINUTE))
    await eventually(lambda: _true(lq.waiting().lease_waiting == 1))
    await lq.produce([Item(payload=b"x")], MINUTE)
    await eventually(done(lease))
    assert not watch.done(), "a watch was told of an item this node's lease took"
    await lq.produce([Item(payload=b"y")], MINUTE)
    await eventually(done(watch))
    assert watch.result() is True
    await lq.shutdown()


async def test_a_watch_times_out_false_and_shutdown_answers_the_others() -> None:
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue)
    short = asyncio.ensure_future(lq.until_items(MICROS))
    long = asyncio.ensure_future(lq.until_items(MINUTE))
    await asyncio.sleep(0)
    clock.advance(1)
    await eventually(done(short))
    assert short.result() is False and not long.done()
    await lq.shutdown()
    await eventually(done(long))
    assert isinstance(long.exception(), QueratorError)


async def test_a_watch_on_a_queue_still_loading_hears_of_the_items_it_loads() -> None:
    """A watch may start the owner's engine: the items its partitions already hold count."""
    clock = FakeClock()
    part = MemoryPartition()
    first = LogicalQueue(Settings(record()), [(0, part)], clock, no_dead_queue)
    await first.produce([Item(payload=b"x")], MINUTE)
    await first.shutdown()
    lq = LogicalQueue(Settings(record()), [(0, part)], clock, no_dead_queue)
    watch = asyncio.ensure_future(lq.until_items(MINUTE))  # before the load ran
    await eventually(done(watch))
    assert watch.result() is True
    await lq.shutdown()


async def _true(value: bool) -> bool:
    return value


async def test_watches_count_against_the_queues_request_limit() -> None:
    """A watch waits as a lease does: beyond ``max_requests`` waiting, watches and requests get 454."""
    clock = FakeClock()
    lq = LogicalQueue(Settings(record()), [(0, MemoryPartition())], clock, no_dead_queue, max_requests=2)
    watches = [asyncio.ensure_future(lq.until_items(MINUTE)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(RetryRequest, match=r"^queue is overloaded"):
        await lq.until_items(MINUTE)
    with pytest.raises(RetryRequest, match=r"^queue is overloaded"):
        await lq.lease("c", 1, MINUTE)
    clock.advance(MINUTE)
    await eventually(done(watches[1]))
    assert [w.result() for w in watches] == [False, False]
    await lq.produce([Item(payload=b"x")], MINUTE)  # room again: the watches ended
    assert await lq.until_items(MINUTE) is True  # items there: answered at once, nothing held
    await lq.shutdown()
