"""``Service`` called in-process on a node of a 2-node cluster (real etcd, real sockets between the nodes,
one shared in-memory store): a program embedding the service gets what an HTTP client gets. What the
other node owns is carried out there and its answer (or its error) comes back as the call's own.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from querator.clock import SystemClock
from querator.cluster.node import ClusterNode
from querator.config import ClusterConfig
from querator.errors import InvalidOption, LeaseTimedOut
from querator.http import create_app
from querator.service import Service
from querator.storage.memory import MemoryStore
from querator.tenancy import AS_SERVER
from querator.wire import messages as m

from .conftest import eventually
from .etcd_server import EtcdServer

pytestmark = pytest.mark.integration

SETTLE = 20.0
"""Seconds the two nodes may take to see each other (a generous deadline for a loaded machine)."""


@dataclass
class Node:
    service: Service
    runner: web.AppRunner


@pytest.fixture
async def two_nodes(etcd: EtcdServer) -> AsyncIterator[tuple[Node, Node]]:
    store = MemoryStore()  # one store, as the nodes of a cluster share one Cassandra
    prefix = "/test-" + uuid.uuid4().hex[:12]
    nodes: list[Node] = []
    try:
        for node_id in ("node-a", "node-b"):
            listener = socket.create_server(("127.0.0.1", 0))
            address = f"127.0.0.1:{listener.getsockname()[1]}"
            config = ClusterConfig((etcd.endpoint,), prefix, node_id, address, lease_ttl=3, grace_period=0.0)
            clock = SystemClock()
            service = Service(store, clock, cluster=ClusterNode(config, clock, address))
            await service.start()
            runner = web.AppRunner(create_app(service))
            await runner.setup()
            await web.SockSite(runner, listener).start()
            nodes.append(Node(service, runner))

        async def both_members() -> bool:
            return all(len(n.service.cluster.members()) == 2 and n.service.cluster.serving for n in nodes)

        await eventually(both_members, SETTLE, "both nodes see both members")
        yield nodes[0], nodes[1]
    finally:
        for node in nodes:
            await node.service.shutdown()
            await node.runner.cleanup()


async def queue_owned_by(service: Service, node_id: str) -> str:
    """A new one-partition queue whose partition ``node_id`` owns."""
    for _ in range(1000):
        name = "q-" + uuid.uuid4().hex[:8]
        if service.cluster.owner(name, 0) == node_id:
            await service.create_queue(
                AS_SERVER,
                m.QueueInfo(queue_name=name, lease_timeout="1m", expire_timeout="1h", requested_partitions=1),
            )
            return name
    raise AssertionError(f"no queue name maps to {node_id}")


async def test_the_service_of_a_node_that_owns_nothing_gets_the_owners_results(
    two_nodes: tuple[Node, Node],
) -> None:
    a, b = two_nodes
    name = await queue_owned_by(a.service, "node-b")
    service = a.service

    await service.produce(
        AS_SERVER,
        m.QueueProduceRequest(
            queue_name=name, request_timeout="5s", items=[m.QueueProduceItem(utf8="hello")]
        ),
    )
    assert service.manager.find(name) is None, "node-a served a queue it owns no partition of"
    lease = await service.lease(
        AS_SERVER, m.QueueLeaseRequest(queue_name=name, batch_size=10, client_id="c", request_timeout="5s")
    )
    assert [i.bytes for i in lease.items] == [b"hello"]
    assert b.service.manager.find(name) is not None, "node-b did not serve its partition"

    stats = await service.stats(AS_SERVER, m.QueueStatsRequest(queue_name=name))
    assert [p.total_leased for q in stats.logical_queues for p in q.partitions] == [1]

    await service.complete(
        AS_SERVER,
        m.QueueCompleteRequest(
            queue_name=name, partition=lease.partition, request_timeout="5s", ids=[lease.items[0].id]
        ),
    )
    # The owner's errors come back typed, with its message.
    with pytest.raises(InvalidOption, match="does not exist"):
        done = [lease.items[0].id]
        await service.complete(
            AS_SERVER, m.QueueCompleteRequest(queue_name=name, request_timeout="5s", ids=done)
        )
    with pytest.raises(LeaseTimedOut):
        await service.lease(
            AS_SERVER,
            m.QueueLeaseRequest(queue_name=name, batch_size=1, client_id="c", request_timeout="100ms"),
        )


async def test_a_bad_request_is_refused_before_it_is_forwarded(two_nodes: tuple[Node, Node]) -> None:
    a, _ = two_nodes
    name = await queue_owned_by(a.service, "node-b")
    with pytest.raises(InvalidOption, match=r"^request timeout is invalid; minimum timeout is '10ms'"):
        items = [m.QueueProduceItem(utf8="x")]
        await a.service.produce(
            AS_SERVER, m.QueueProduceRequest(queue_name=name, request_timeout="1ms", items=items)
        )
    with pytest.raises(InvalidOption, match=r"^partition is invalid; '1' is not a valid partition"):
        await a.service.complete(
            AS_SERVER, m.QueueCompleteRequest(queue_name=name, partition=1, request_timeout="5s", ids=["x"])
        )
