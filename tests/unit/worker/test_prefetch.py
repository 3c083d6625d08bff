"""Items held ahead of a worker's slots (``prefetch``, docs/adr/0053), in a real node in the test's
process: a warm stop gives them back unrun, except one on its last attempt, which a retry would
dead-letter unrun."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import pytest

from querator.client import AsyncClient
from querator.testing import Node
from querator.worker import Worker
from tests.conftest import eventually


@pytest.mark.parametrize(("max_attempts", "runs"), [(0, [0]), (1, [0, 1])])
async def test_a_warm_stop_gives_held_items_back_unless_on_their_last_attempt(
    max_attempts: int, runs: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """One slot, one item held: with attempts to spare the held item goes back to its queue unrun (its
    lease's attempt spent); on its last attempt it waits for the slot and runs, and nothing dies."""
    caplog.set_level(logging.INFO, "querator.worker")
    worker = Worker("http://unused.invalid", concurrency=1, prefetch=1)
    ran: list[int] = []
    go = asyncio.Event()

    @worker.task(queue="ahead", max_attempts=max_attempts, create_queue=True)
    async def wait(n: int) -> None:
        ran.append(n)
        await go.wait()

    async with Node() as node:
        worker.connect(node.url)
        await wait.enqueue_many([((n,), {}) for n in range(2)])
        client = AsyncClient(node.url)

        async def leased(n: int) -> bool:
            items = (await client.list_items("ahead", 0)).items
            return sum(i.is_leased for i in items) == n

        async with node.running(worker):
            try:
                await eventually(lambda: leased(2))  # one running, one held
                assert ran == [0]
                worker.stop()
                # Past this record the held item has seen the stop (it is logged as the stop begins).
                await eventually(lambda: _true(any("worker stopping" in r.message for r in caplog.records)))
                if not max_attempts:
                    await eventually(lambda: leased(1))  # given back while the run still holds the slot
            finally:
                go.set()  # else the warm stop would wait for the run
        assert ran == runs
        items = (await client.list_items("ahead", 0)).items
        assert [(i.is_leased, i.attempts) for i in items] == ([(False, 1)] if not max_attempts else [])
        assert (await client.list_items("ahead-dead", 0)).items == []
        await client.close()


async def test_a_worker_holds_as_many_items_ahead_as_it_has_slots_by_default() -> None:
    """docs/adr/0067: with no ``prefetch`` a worker of 2 slots leases 4 items, 2 running and 2 held."""
    worker = Worker("http://unused.invalid", concurrency=2)
    go = asyncio.Event()

    @worker.task(queue="ahead", create_queue=True)
    async def wait(n: int) -> None:
        await go.wait()

    async with Node() as node:
        worker.connect(node.url)
        await wait.enqueue_many([((n,), {}) for n in range(6)])
        client = AsyncClient(node.url)

        async def leased() -> int:
            return sum(i.is_leased for i in (await client.list_items("ahead", 0)).items)

        async with node.running(worker):
            try:
                await eventually(lambda: _equal(leased(), 4))
            finally:
                go.set()
        await client.close()


async def _equal(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


def test_a_negative_prefetch_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^worker: prefetch cannot be negative$"):
        Worker("http://unused.invalid", prefetch=-1)


async def _true(value: bool) -> bool:
    return value
