"""A task's ``partitions`` (docs/worker.md): the queue ``create_queue`` makes gets that many, a queue that
exists keeps its own, and the worker leases from that many partitions at once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from querator.client import AsyncClient
from querator.testing import Node
from querator.worker import Worker
from querator.worker._runner import QueueRunner, Reservations, Runtime
from querator.worker._settle import Settler
from querator.worker._slots import Slots
from tests.conftest import eventually


async def test_create_queue_makes_the_tasks_partitions() -> None:
    worker = Worker("http://unused.invalid")

    @worker.task(queue="wide", partitions=4, create_queue=True, dead_queue="")
    async def noop() -> None: ...

    async with Node() as node:
        worker.connect(node.url)
        try:
            await noop.enqueue()
            client = await worker.client_for()
            assert (await client.queue_info("wide")).requested_partitions == 4
        finally:
            await worker.close()


async def test_a_queue_that_exists_keeps_its_partitions() -> None:
    """Creating is idempotent: the worker finds the queue and runs its items, without changing it."""
    worker = Worker("http://unused.invalid")
    ran: list[int] = []

    @worker.task(queue="narrow", partitions=8, create_queue=True, dead_queue="")
    async def note(n: int) -> None:
        ran.append(n)

    async with Node() as node, AsyncClient(node.url) as client:
        await client.create_queue("narrow", lease_timeout="1m", partitions=2)
        worker.connect(node.url)
        await note.enqueue(1)
        async with node.running(worker, concurrency=4):
            await eventually(lambda: _true(ran == [1]))
        assert (await client.queue_info("narrow")).requested_partitions == 2


@pytest.mark.parametrize("count", [0, -1])
def test_partitions_must_be_positive(count: int) -> None:
    with pytest.raises(ValueError, match="worker: partitions must be at least 1"):
        Worker("http://unused.invalid").task(queue="q", partitions=count)


@pytest.mark.parametrize(("partitions", "concurrency", "leasers"), [(None, 16, 1), (4, 16, 4), (32, 8, 8)])
async def test_the_worker_leases_from_as_many_partitions_at_once(
    partitions: int | None, concurrency: int, leasers: int
) -> None:
    """A lease takes from one partition: a queue of several is leased by that many loops at once (at
    most the worker's concurrency), so that their partitions' transactions run side by side."""
    worker = Worker("http://unused.invalid")

    @worker.task(queue="q", partitions=partitions)
    async def noop() -> None: ...

    async with AsyncClient("http://unused.invalid") as client:
        with ThreadPoolExecutor(max_workers=1) as pool:
            runtime = Runtime(
                client,
                Settler(client),
                worker.metrics,
                Reservations(concurrency),
                Slots(concurrency),
                pool,
            )
            assert QueueRunner(runtime, "q", [noop]).leasers == leasers


async def _true(value: bool) -> bool:
    return value
