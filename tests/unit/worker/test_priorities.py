"""Priority levels run in a real node in the test's process (querator.testing): the fairness a user may
choose (docs/worker.md, "Priorities")."""

from __future__ import annotations

from querator.testing import Node
from querator.worker import Worker
from tests.conftest import eventually


async def test_lowest_first_every_lets_low_items_through_a_stream_of_high_ones() -> None:
    """With ``lowest_first_every=2`` every second lease looks at the low level first: a backlog of high
    and low items alternates on a one-slot worker, where strict levels would run every high item first
    (tests/integration/test_worker.py shows the strict order)."""
    worker = Worker("http://unused.invalid", lowest_first_every=2, prefetch=0)  # one item per lease
    ran: list[str] = []

    @worker.task(queue="mixed", priority="normal", create_queue=True)
    async def note(key: str) -> None:
        ran.append(key)

    async with Node() as node:
        worker.connect(node.url)
        await note.enqueue_many([((f"h{n}",), {}) for n in range(3)], priority="high")
        await note.enqueue_many([((f"l{n}",), {}) for n in range(3)], priority="low")
        async with node.running(worker, concurrency=1):
            await eventually(lambda: _true(len(ran) == 6))
    assert ran == ["h0", "l0", "h1", "l1", "h2", "l2"]


async def _true(value: bool) -> bool:
    return value
