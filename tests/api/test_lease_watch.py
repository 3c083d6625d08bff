"""A lease waiting at a member that shares its queue with other owners (ADR 0042): it watches them
instead of asking each in turn, so an idle consumer costs the same whatever the number of members, and
items produced at another owner still reach it. In-process nodes of several members (``start_node``:
real HTTP between them, signed forwards), on the system clock.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from querator.clock import SystemClock
from querator.errors import LeaseTimedOut, RetryRequest
from querator.service import Service
from querator.tenancy import AS_SERVER
from querator.wire import messages as m
from tests.conftest import Node, eventually, start_node

IDLE_LEASES = 3
"""Leases each idle consumer makes in a row."""
CONSUMERS = 3
DEADLINE_S = 20.0


@asynccontextmanager
async def cluster(backend: str, tmp_path: Path, members: int) -> AsyncIterator[tuple[Node, str]]:
    """A node of ``members`` members and a queue with a partition at each of them."""
    node, _ = await start_node(backend, tmp_path / f"db{members}", SystemClock(), members)
    try:
        ids = {s.cluster.node_id for s in node.members}
        for _ in range(1000):
            name = "q-" + uuid.uuid4().hex[:8]
            if {node.members[0].cluster.owner(name, n) for n in range(members)} == ids:
                break
        await node.members[0].create_queue(
            AS_SERVER,
            m.QueueInfo(
                queue_name=name, lease_timeout="1m", expire_timeout="1h", requested_partitions=members
            ),
        )
        yield node, name
    finally:
        await node.close()


def lease(service: Service, queue: str, client: str, timeout: str) -> Awaitable[m.QueueLeaseResponse]:
    return service.lease(
        AS_SERVER,
        m.QueueLeaseRequest(queue_name=queue, batch_size=1, client_id=client, request_timeout=timeout),
    )


def forwards(service: Service, route: str) -> float:
    """The requests ``service`` sent to other members on ``route``, whatever their answer."""
    return sum(
        sample.value
        for metric in service.metrics.registry.collect()
        if metric.name == "querator_cluster_forwards"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["route"] == route
    )


async def idle_consumers(service: Service, queue: str) -> None:
    """``CONSUMERS`` consumers each leasing ``IDLE_LEASES`` times in a row from an empty queue."""

    async def consumer(n: int) -> None:
        for _ in range(IDLE_LEASES):
            # Empty-handed either way: a look into a partition still under way at the deadline (a loaded
            # machine's sqlite) answers "not stored, try again" rather than a timeout (docs/semantics.md).
            with pytest.raises((LeaseTimedOut, RetryRequest)):
                await lease(service, queue, f"c{n}", "300ms")

    await asyncio.gather(*(consumer(n) for n in range(CONSUMERS)))


async def test_an_idle_lease_asks_no_other_owner_whatever_the_number_of_members(
    backend: str, tmp_path: Path
) -> None:
    """docs/adr/0042: idle consumers send no probe (a lease asked of another owner); their member keeps
    one watch per other owner, shared by all its consumers and all their leases."""
    probes: dict[int, float] = {}
    watches: dict[int, int] = {}
    for members in (2, 4):
        async with cluster(backend, tmp_path, members) as (node, queue):
            here = node.members[0]
            await idle_consumers(here, queue)
            probes[members] = forwards(here, "/v1/queue.lease")
            assert probes[members] == 0, f"idle leases asked other owners for items ({members} members)"
            assert here.watches.counters.probes == 0
            assert here.watches.counters.notifications == 0
            watches[members] = here.watches.counters.watches
    # One watch per other owner (renewed only every WATCH_S), not one per lease or per consumer.
    assert watches == {2: 1, 4: 3}


async def test_items_produced_at_another_owner_wake_a_waiting_lease(backend: str, tmp_path: Path) -> None:
    async with cluster(backend, tmp_path, 3) as (node, queue):
        here, there = node.members[0], node.members[1]
        waiting = asyncio.ensure_future(lease(here, queue, "c", "60s"))
        await eventually(_counted(lambda: here.watches.counters.watches == 2), DEADLINE_S)
        produced = await there.produce(
            AS_SERVER,
            m.QueueProduceRequest(
                queue_name=queue, request_timeout="5s", items=[m.QueueProduceItem(utf8="x")]
            ),
        )
        # Polled with a deadline far below the lease's own timeout: the watch brought it, not a timeout.
        reply = await asyncio.wait_for(waiting, DEADLINE_S)
        assert [i.id for i in reply.items] == produced.ids
        assert here.watches.counters.notifications == 1
        assert here.watches.counters.probes == 1
        assert there.manager.find(queue) is not None


async def test_a_lease_here_is_served_here_while_it_watches(backend: str, tmp_path: Path) -> None:
    async with cluster(backend, tmp_path, 2) as (node, queue):
        here = node.members[0]
        waiting = asyncio.ensure_future(lease(here, queue, "c", "60s"))
        await eventually(_counted(lambda: here.watches.counters.watches == 1), DEADLINE_S)
        produced = await here.produce(
            AS_SERVER,
            m.QueueProduceRequest(
                queue_name=queue, request_timeout="5s", items=[m.QueueProduceItem(utf8="x")]
            ),
        )
        reply = await asyncio.wait_for(waiting, DEADLINE_S)
        assert [i.id for i in reply.items] == produced.ids
        assert here.watches.counters.probes == 0


def _counted(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def checked() -> bool:
        return check()

    return checked
