"""The lease loop and the settlements overlap (querator/worker/_runner.py): a worker leases its next
items while the completes of the last ones are in flight, in a real node in the test's process."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from querator.client import AsyncClient
from querator.testing import Node
from querator.worker import Worker
from tests.conftest import eventually


async def test_the_next_lease_does_not_wait_for_the_last_items_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Completes are held until the test lets them go: a worker of concurrency 2 still runs all 4
    items (two leases of two), because a slot is free once its run ended, not once its outcome is
    stored; once let go, every item is completed, each once."""
    worker = Worker("http://unused.invalid", prefetch=0)  # leases only what its slots can run
    ran: list[int] = []
    release = asyncio.Event()
    completed: list[str] = []
    leased: list[int] = []
    complete, lease = AsyncClient.complete, AsyncClient.lease

    async def held_complete(self: AsyncClient, queue: str, partition: int, ids: Any, **kw: Any) -> None:
        await release.wait()
        await complete(self, queue, partition, ids, **kw)
        completed.extend(ids)

    async def counted_lease(self: AsyncClient, *args: Any, **kw: Any) -> Any:
        reply = await lease(self, *args, **kw)
        if reply.items:
            leased.append(len(reply.items))
        return reply

    monkeypatch.setattr(AsyncClient, "complete", held_complete)
    monkeypatch.setattr(AsyncClient, "lease", counted_lease)

    @worker.task(queue="overlap", create_queue=True)
    async def note(n: int) -> None:
        ran.append(n)

    async with Node() as node:
        worker.connect(node.url)
        await note.enqueue_many([((n,), {}) for n in range(4)])
        async with node.running(worker, concurrency=2):
            try:
                await eventually(lambda: _true(len(ran) == 4))
                assert completed == []
            finally:
                release.set()  # else the warm stop would wait for the held completes
            await eventually(lambda: _true(len(completed) == 4))
    assert sorted(ran) == [0, 1, 2, 3]
    assert len(set(completed)) == 4
    assert leased == [2, 2]


async def _true(value: bool) -> bool:
    return value
