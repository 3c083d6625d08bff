"""A lease whose client went away takes nothing (docs/reliability.md, "Disconnected leases").

aiohttp does not cancel a handler when its client disconnects unless told to; before it was, a parked
lease lived on until its request_timeout, leased the next item to nobody (an attempt spent: with
``max_attempts: 1`` the item died undelivered) and refused its client id to the consumer's next lease.
Here the client leaves in the two ways production sees: it closes its socket (an HTTP timeout shorter than
the request_timeout, a restarted consumer), or a proxy in between cuts the connection at its idle timeout
(a load balancer's 60 s, made 0.5 s here).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import msgspec
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from querator.client import AsyncClient
from querator.cluster.local_members import process_owner
from querator.cluster.node import LOCAL_NODE

from .conftest import ServerProcess, Servers, eventually
from .test_processes import PROCESSES, all_listening, private_addresses

pytestmark = pytest.mark.integration

LEASE = {"queue_name": "q", "batch_size": 1, "client_id": "worker-1", "request_timeout": "30s"}
DEADLINE = 10.0
"""Seconds to wait for the server to notice a client gone; far below the lease's 30 s."""


async def leases_waiting(client: AsyncClient, expected: int) -> bool:
    stats = await client.stats("q")
    return sum(lq.lease_waiting for lq in stats.logical_queues) == expected


def lease_request(body: bytes) -> bytes:
    """A raw HTTP lease request: sent on a bare socket, closing the socket is the client leaving."""
    return (
        f"POST /v1/queue.lease HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def one_item_reaches_the_same_client(client: AsyncClient) -> None:
    """Once the abandoned lease is gone: an item produced now goes to the consumer's next lease, as
    its first attempt, under the same client id."""
    await eventually(lambda: leases_waiting(client, 0), DEADLINE, "the abandoned lease was dropped")
    await client.produce("q", [b"hello"])
    reply = await client.lease("q", 1, "worker-1", request_timeout="5s")
    assert [(i.bytes, i.attempts) for i in reply.items] == [(b"hello", 1)]


async def leases_timed(url: str) -> dict[str, float]:
    """The count of lease requests in the latency histogram of the server at ``url``, by status code."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as reply:
        text = await reply.text()
    return {
        sample.labels["code"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "querator_request_duration_seconds_count"
        and sample.labels["route"] == "/v1/queue.lease"
    }


@pytest.fixture
async def node(servers: Servers) -> AsyncIterator[tuple[ServerProcess, AsyncClient]]:
    server = servers.start("--storage", "memory")
    async with AsyncClient(server.url) as client:
        await client.create_queue("q", max_attempts=1, lease_timeout="1m")
        yield server, client


async def test_a_lease_whose_client_closed_its_socket_takes_nothing(
    node: tuple[ServerProcess, AsyncClient],
) -> None:
    server, client = node
    with socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE) as sock:
        sock.sendall(lease_request(msgspec.json.encode(LEASE)))
        await eventually(lambda: leases_waiting(client, 1), DEADLINE, "the lease is parked")
    await one_item_reaches_the_same_client(client)
    # The abandoned lease is timed under 499 (the client went away), the one served under 200.
    assert await leases_timed(server.url) == {"200": 1, "499": 1}


async def idle_cutting_proxy(upstream: str, idle_timeout: float) -> web.AppRunner:
    """A reverse proxy that gives up on a request after ``idle_timeout`` seconds without a reply,
    closing its connection to ``upstream`` and answering 504, as load balancers do."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=idle_timeout))

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            async with session.post(
                upstream + request.path, data=await request.read(), headers=request.headers
            ) as reply:
                return web.Response(status=reply.status, body=await reply.read())
        except TimeoutError:
            return web.Response(status=504, text="upstream idle")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", forward)
    app.on_cleanup.append(lambda _: session.close())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def test_a_lease_cut_by_a_proxy_idle_timeout_takes_nothing(
    node: tuple[ServerProcess, AsyncClient],
) -> None:
    server, client = node
    runner = await idle_cutting_proxy(server.url, idle_timeout=0.5)
    try:
        host, port = runner.addresses[0][:2]
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"http://{host}:{port}/v1/queue.lease", json=LEASE) as reply,
        ):
            assert reply.status == 504
        await one_item_reaches_the_same_client(client)
    finally:
        with contextlib.suppress(Exception):
            await runner.cleanup()


async def test_a_forwarded_lease_whose_client_left_takes_nothing_at_the_owner(servers: Servers) -> None:
    """A node of two processes: the lease reaches the process that does not own the queue, which
    forwards it to the owner over a pooled connection. Its client leaving cancels the forward, which
    closes that connection, and the owner drops its waiting lease (timed there under 499): the next
    item goes to the next lease as its first attempt, not to nobody until the lease_timeout of a
    minute."""
    server = servers.start("--storage", "memory", "--processes", str(PROCESSES))
    await all_listening(server)
    addresses = private_addresses(server)
    owner = process_owner(LOCAL_NODE, PROCESSES)("q", 0)
    far, near = addresses[1 - owner], addresses[owner]
    async with AsyncClient(f"http://{near}") as client:
        await client.create_queue("q", max_attempts=1, lease_timeout="1m")
        host, port = far.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=DEADLINE) as sock:
            sock.sendall(lease_request(msgspec.json.encode(LEASE)))
            await eventually(lambda: leases_waiting(client, 1), DEADLINE, "the lease waits at the owner")
        await one_item_reaches_the_same_client(client)
    assert await leases_timed(f"http://{near}") == {"200": 1, "499": 1}
