"""Where a client that reaches owners (``reach_owners=True``) sends each request, against fake members
that record what they got: the owner map read from ``cluster.info`` at the endpoint, once at a time, and
the fallbacks when it is stale or cannot be had (docs/adr/0040-clients-reach-partition-owners.md). The
real cluster is in tests/integration/test_cluster_owner_clients.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from querator import wire
from querator.client import AsyncClient
from querator.wire import messages as m
from tests.api.test_client_cli import free_port

QUEUE = "q"
TOO_MANY = 454


@dataclass
class Member:
    """A fake member: answers every queue route with an empty success, ``cluster.info`` with ``info``."""

    got: list[str] = field(default_factory=list)
    info: m.ClusterInfoResponse | None = None
    refuse: int = 0
    """Answer this many queue requests 454 first."""
    address: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.got.append(request.path)
        if request.path == "/v1/cluster.info":
            if self.info is None:
                return reply(403, m.Reply(code=403, message="permission denied; not yours"))
            return reply(200, self.info)
        if self.refuse:
            self.refuse -= 1
            return reply(TOO_MANY, m.Reply(code=TOO_MANY, message="the partition moved to another node"))
        if request.path == "/v1/queue.lease":
            return reply(200, m.QueueLeaseResponse(queue_name=QUEUE, partition=1))
        return reply(200, m.Reply())


def reply(status: int, msg: m.Message) -> web.Response:
    return web.Response(status=status, body=wire.encode_json(msg), content_type=wire.JSON)


@pytest.fixture
async def members() -> AsyncIterator[list[Member]]:
    """Three fake members, listening."""
    runners: list[web.AppRunner] = []
    found: list[Member] = []
    for _ in range(3):
        member = Member()
        app = web.Application()
        app.router.add_post("/{path:.*}", member.handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        member.address = f"127.0.0.1:{runner.addresses[0][1]}"
        runners.append(runner)
        found.append(member)
    yield found
    for runner in runners:
        await runner.cleanup()


def cluster(
    addresses: list[str], owners: list[int], states: list[str] | None = None
) -> m.ClusterInfoResponse:
    """``cluster.info`` of members ``n0``, ``n1``...  at ``addresses``; partition ``p`` owned by
    ``n<owners[p]>``."""
    states = states or ["serving"] * len(addresses)
    return m.ClusterInfoResponse(
        node_id="n0",
        members=[
            m.ClusterMember(node_id=f"n{n}", address=a, state=s)
            for n, (a, s) in enumerate(zip(addresses, states, strict=True))
        ],
        partitions=[
            m.ClusterPartition(queue_name=QUEUE, partition=p, owner=f"n{o}") for p, o in enumerate(owners)
        ],
    )


def queue_requests(member: Member) -> list[str]:
    return [p for p in member.got if p != "/v1/cluster.info"]


async def test_requests_go_straight_to_the_owners(members: list[Member]) -> None:
    a, b, c = members
    a.info = cluster([a.address, b.address, c.address], owners=[1, 2, 1, 0])
    async with AsyncClient(f"http://{a.address}", reach_owners=True) as client:
        for _ in range(6):
            await client.produce(QUEUE, ["x"])
        await client.complete(QUEUE, 1, ["id"])
        await client.renew(QUEUE, 2, ["id"])
        await client.retry(QUEUE, 3, ["id"])
        await client.lease(QUEUE)
        await client.stats(QUEUE)  # not an owner's request: the endpoint serves it
    # The produces spread over the owners in turn; each partition's request reached its owner.
    assert queue_requests(a).count("/v1/queue.produce") == 2
    assert queue_requests(b).count("/v1/queue.produce") == 2
    assert queue_requests(c).count("/v1/queue.produce") == 2
    assert "/v1/queue.complete" in c.got and "/v1/queue.renew" in b.got and "/v1/queue.retry" in a.got
    assert "/v1/queue.stats" in a.got
    assert a.got.count("/v1/cluster.info") == 1  # read once for the whole run


async def test_an_owner_that_is_gone_is_reached_through_the_endpoint(members: list[Member]) -> None:
    a, b, _ = members
    gone = f"127.0.0.1:{free_port()}"
    a.info = cluster([a.address, b.address, gone], owners=[2, 1])
    async with AsyncClient(f"http://{a.address}", reach_owners=True, retries=None) as client:
        await client.complete(QUEUE, 0, ["id"])  # no retries: the fallback is not one
        assert queue_requests(a) == ["/v1/queue.complete"]
        a.info = cluster([a.address, b.address], owners=[0, 1])  # what the endpoint says now
        await client.complete(QUEUE, 0, ["id"])
    assert a.got.count("/v1/cluster.info") == 2  # the failure dropped the map
    assert queue_requests(b) == []


async def test_a_454_from_an_owner_drops_the_map(members: list[Member]) -> None:
    a, b, _ = members
    a.info = cluster([a.address, b.address], owners=[1, 1])
    b.refuse = 1
    async with AsyncClient(f"http://{a.address}", reach_owners=True) as client:
        await client.complete(QUEUE, 0, ["id"])  # 454 "not done", tried again under the retries
    assert queue_requests(b) == ["/v1/queue.complete"] * 2
    assert a.got.count("/v1/cluster.info") == 2


@pytest.mark.parametrize(
    "info",
    [
        None,  # 403: the key may not read the queue's stats
        m.ClusterInfoResponse(node_id="local", members=[m.ClusterMember(node_id="local", address="x:1")]),
    ],
    ids=["no-map", "a-node-alone"],
)
async def test_without_a_map_the_endpoint_serves_everything(
    members: list[Member], info: m.ClusterInfoResponse | None
) -> None:
    a = members[0]
    a.info = info
    async with AsyncClient(f"http://{a.address}", reach_owners=True) as client:
        await client.produce(QUEUE, ["x"])
        await client.complete(QUEUE, 3, ["id"])
        await client.lease(QUEUE)
    assert queue_requests(a) == ["/v1/queue.produce", "/v1/queue.complete", "/v1/queue.lease"]
    assert a.got.count("/v1/cluster.info") == 1  # not asked again before the refresh


async def test_an_owner_in_its_grace_period_is_asked_through_the_endpoint(members: list[Member]) -> None:
    a, b, c = members
    a.info = cluster([a.address, b.address, ""], owners=[2, 1], states=["serving", "serving", "grace"])
    async with AsyncClient(f"http://{a.address}", reach_owners=True) as client:
        await client.complete(QUEUE, 0, ["id"])
        await client.produce(QUEUE, ["x"])
        await client.produce(QUEUE, ["x"])
    assert queue_requests(a) == ["/v1/queue.complete"]
    assert queue_requests(b) == ["/v1/queue.produce"] * 2  # the only owner that serves
    assert c.got == []


async def test_callers_at_once_read_the_map_once(members: list[Member]) -> None:
    a, b, _ = members
    a.info = cluster([a.address, b.address], owners=[1, 0])
    async with AsyncClient(f"http://{a.address}", reach_owners=True) as client:
        await asyncio.gather(*(client.produce(QUEUE, ["x"]) for _ in range(20)))
    assert a.got.count("/v1/cluster.info") == 1
    assert len(queue_requests(a)) + len(queue_requests(b)) == 20
