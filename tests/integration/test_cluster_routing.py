"""A cluster that shares its queues: ``querator serve --cluster`` processes on a real etcd and one
Cassandra keyspace. Every partition is served by the node the ring makes its owner; any node accepts any
request and forwards what it does not own.

- Produce through every node, lease through one, complete through another: each item is delivered once,
  in FIFO order within its partition, for queues of 1, 8 and 64 partitions.
- A node killed with SIGKILL: once its etcd lease is gone the others claim its partitions from Cassandra;
  no acknowledged item is lost, and the items it had leased come back when their leases expire.
- Twelve consumers spread over three nodes drain a backlog produced through every node: each consumer
  is served, and the items were spread over all partitions.
- Dead-lettering, redrive and produce de-duplication across nodes: dead items reach the dead queue's
  owner, a redrive through any node moves every partition's items, and one dedup id produced through
  two nodes is stored once.
- With API keys and a cluster secret: a client's request forwarded by a non-owner is served (the nodes
  sign what they forward with the secret), and a client forging the forwarded header gains nothing.
- A fourth node joins and then one leaves (SIGTERM) while producers keep producing: about a quarter of
  the partitions move to the new node and the leaver's to the others; nothing is lost, nothing is
  stored twice, no request fails other than with 454, and a lease taken before the moves is completed
  after them.
- etcd stopped and restarted while producers and a consumer keep working: the nodes stop serving (454,
  never another error) and serve again by themselves; nothing is lost or stored twice.
- A node paused (SIGSTOP) past its lease: the others take its partitions over; when it resumes, storage
  refuses its writes (the epoch fence), it stops serving them, and nothing is lost or completed twice.
"""

from __future__ import annotations

import asyncio
import signal
import ssl
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiohttp

from querator.auth import FORWARDED_HEADER
from querator.client import AsyncClient
from querator.clock import SystemClock
from querator.errors import RetryRequest
from querator.wire import messages as m
from tests.cassandra_node import CassandraNode

from .conftest import ServerProcess, Servers, eventually, keyed_cluster, kill9
from .etcd_server import EtcdServer
from .test_cassandra import cassandra_args

T = TypeVar("T")
DEADLINE = 60.0
LEASE_TTL = "2s"


def member_args(etcd: EtcdServer, storage: tuple[str, ...], prefix: str, n: int) -> tuple[str, ...]:
    """Node ``n`` of the cluster under ``prefix`` on the shared store of ``storage``'s arguments."""
    return (
        *storage,
        "--cluster", etcd.cluster_url(prefix), "--node-id", f"node-{n}",
        "--etcd-lease-ttl", LEASE_TTL, "--cluster-grace-period", "0s",
    )  # fmt: skip


def node_args(etcd: EtcdServer, node: CassandraNode, keyspace: str, prefix: str, n: int) -> tuple[str, ...]:
    return member_args(etcd, cassandra_args(node, keyspace), prefix, n)


async def start_members(
    servers: Servers, etcd: EtcdServer, storage: tuple[str, ...], prefix: str, count: int = 3
) -> list[ServerProcess]:
    """``count`` nodes of one cluster on the store of ``storage``'s arguments, once they all agree."""
    nodes = [await servers.astart(*member_args(etcd, storage, prefix, n)) for n in range(count)]
    await members_are(nodes, count)
    return nodes


async def start_cluster(
    servers: Servers, etcd: EtcdServer, node: CassandraNode, keyspace: str, prefix: str, count: int = 3
) -> list[ServerProcess]:
    return await start_members(servers, etcd, cassandra_args(node, keyspace), prefix, count)


async def members_are(nodes: list[ServerProcess], count: int) -> None:
    async def agreed() -> bool:
        views = []
        for server in nodes:
            async with AsyncClient(server.url) as client:
                try:
                    views.append([mm.node_id for mm in (await client.cluster_info()).members])
                except RetryRequest:  # its storage is not back yet (a Cassandra restart)
                    return False
        return all(len(v) == count for v in views) and all(v == views[0] for v in views)

    await eventually(agreed, DEADLINE, f"every node sees the same {count} members")


async def retried(call: Callable[[], Awaitable[T]]) -> T:
    """``call`` until it does not answer 454 (a partition moving, a lease with nothing to lease)."""
    deadline = SystemClock().monotonic() + DEADLINE
    while True:
        try:
            return await call()
        except RetryRequest:
            if SystemClock().monotonic() > deadline:
                raise


async def owners(server: ServerProcess, queue: str) -> dict[int, str]:
    async with AsyncClient(server.url) as client:
        return {p.partition: p.owner for p in (await client.cluster_info(queue)).partitions}


async def produce_everywhere(
    nodes: list[ServerProcess], queue: str, count: int, batch: int = 10, api_key: str | None = None
) -> list[str]:
    """Produces ``count`` items through every node in turn, one batch at a time; returns the payloads
    in the order they were acknowledged."""
    produced: list[str] = []
    for start in range(0, count, batch):
        payloads = [f"{queue}-{n:05d}" for n in range(start, min(count, start + batch))]
        server = nodes[(start // batch) % len(nodes)]
        async with AsyncClient(server.url, api_key=api_key) as client:
            await retried(lambda c=client, p=payloads: c.produce(queue, p))
        produced.extend(payloads)
    return produced


async def keep_producing(
    server: ServerProcess, name: str, batch: int, acknowledged: list[str], stop: asyncio.Event
) -> None:
    """Produces batches into ``jobs`` through ``server`` until ``stop``, recording what was acknowledged.
    Retries of a 454 carry the same dedup ids: a produce caught by a hand-off is stored once."""
    async with AsyncClient(server.url) as client:
        n = 0
        while not stop.is_set():
            payloads = [f"{name}-{n:05d}-{k}" for k in range(batch)]
            items = [m.QueueProduceItem(utf8=p, dedup_id=p) for p in payloads]
            await retried(lambda i=items: client.produce("jobs", i))
            acknowledged.extend(payloads)
            n += 1


async def jobs_everywhere(
    nodes: list[ServerProcess], partitions: int, lease_timeout: str, count: int
) -> list[str]:
    """Creates the queue ``jobs`` and produces ``count`` items into it through every node."""
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("jobs", partitions=partitions, lease_timeout=lease_timeout)
    return await produce_everywhere(nodes, "jobs", count)


async def drain(
    lease_through: ServerProcess | str,
    complete_through: ServerProcess | str,
    queue: str,
    expected: int,
    api_key: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> dict[int, list[str]]:
    """Leases through one node and completes through another (each a node or its API URL) until
    ``expected`` items were delivered; returns the payloads delivered per partition, in delivery order."""
    delivered: dict[int, list[str]] = defaultdict(list)
    if expected <= 0:
        return delivered
    lease_url = lease_through if isinstance(lease_through, str) else lease_through.url
    complete_url = complete_through if isinstance(complete_through, str) else complete_through.url
    leaser = AsyncClient(lease_url, api_key=api_key, ssl=tls)
    completer = AsyncClient(complete_url, api_key=api_key, ssl=tls)
    async with leaser, completer:

        async def step() -> bool:
            try:
                reply = await leaser.lease(queue, batch_size=100, client_id="drain", request_timeout="1s")
            except RetryRequest:
                return False
            if not reply.items:
                return False
            await retried(lambda: completer.complete(queue, reply.partition, [i.id for i in reply.items]))
            delivered[reply.partition].extend(i.bytes.decode() for i in reply.items)
            return sum(map(len, delivered.values())) >= expected

        await eventually(step, DEADLINE, f"draining {expected} items of {queue!r}")
    return delivered


async def stats_total(server: ServerProcess, queue: str) -> tuple[int, int]:
    """(items, leased) over every partition, as one node reports for the whole cluster."""
    async with AsyncClient(server.url) as client:
        stats = await retried(lambda: client.stats(queue))
    parts = [p for lq in stats.logical_queues for p in lq.partitions]
    return sum(p.total for p in parts), sum(p.total_leased for p in parts)


async def test_any_node_serves_every_partition(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/routing")
    a, b, c = nodes
    async with AsyncClient(a.url) as client:
        for partitions in (1, 8, 64):
            await client.create_queue(f"q{partitions}", partitions=partitions, lease_timeout="30s")
    for partitions in (1, 8, 64):
        queue = f"q{partitions}"
        spread = await owners(b, queue)
        assert spread == await owners(c, queue) and len(spread) == partitions
        produced = await produce_everywhere(nodes, queue, 300)
        delivered = await drain(b, c, queue, len(produced))
        everything = [p for items in delivered.values() for p in items]
        assert sorted(everything) == produced, "each acknowledged item delivered exactly once"
        for partition, items in delivered.items():
            assert items == sorted(items), f"partition {partition} of {queue} out of FIFO order"
        if partitions > 1:
            # Items were produced through all three nodes, so the consumer on b drained partitions of
            # every owner, not only its own.
            assert {spread[p] for p in delivered} == {"node-0", "node-1", "node-2"}
        assert await stats_total(a, queue) == (0, 0)


async def test_twelve_consumers_over_three_nodes_are_all_served(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/consumers")
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("jobs", partitions=12, lease_timeout="1m")
    total = 1200
    by_consumer: dict[str, list[str]] = defaultdict(list)
    by_partition: dict[int, int] = defaultdict(int)

    async def consumer(server: ServerProcess, name: str) -> None:
        async with AsyncClient(server.url) as client:
            while sum(map(len, by_consumer.values())) < total:
                try:
                    reply = await client.lease("jobs", batch_size=10, client_id=name, request_timeout="1s")
                except RetryRequest:
                    continue
                if not reply.items:
                    continue
                ids = [i.id for i in reply.items]
                await retried(lambda p=reply.partition, i=ids: client.complete("jobs", p, i))
                by_consumer[name].extend(i.bytes.decode() for i in reply.items)
                by_partition[reply.partition] += len(ids)

    # A backlog first: produce goes to the partition with the fewest un-leased items, so with consumers
    # keeping up every node would keep using one partition (the reference's distribution).
    produced = await produce_everywhere(nodes, "jobs", total)
    consumers = [asyncio.create_task(consumer(nodes[n % 3], f"consumer-{n}")) for n in range(12)]
    try:
        await eventually(
            lambda: _at_least([p for got in by_consumer.values() for p in got], total),
            DEADLINE,
            "every item consumed",
        )
    finally:
        await asyncio.gather(*consumers)
    everything = [p for got in by_consumer.values() for p in got]
    assert sorted(everything) == produced
    spread = {name: len(got) for name, got in sorted(by_consumer.items())}
    assert len(spread) == 12 and min(spread.values()) > 0, f"a consumer starved: {spread}"
    assert sorted(by_partition) == list(range(12)), f"items reached every partition: {dict(by_partition)}"
    average = total / 12
    assert min(by_partition.values()) >= average / 4, f"partitions unevenly used: {dict(by_partition)}"


async def test_dead_letters_redrive_and_dedup_across_nodes(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    a, b, c = await start_cluster(servers, etcd, cassandra_node, keyspace, "/extensions")
    async with AsyncClient(a.url) as client:
        await client.create_queue("dead", partitions=1)
        await client.create_queue("work", partitions=8, dead_queue="dead")
    produced = await produce_everywhere([a, b, c], "work", 60)
    # Every item dies through c, whichever node owns its partition or the dead queue.
    async with AsyncClient(b.url) as leaser, AsyncClient(c.url) as retrier:

        async def kill_some() -> bool:
            try:
                reply = await leaser.lease("work", batch_size=100, client_id="k", request_timeout="1s")
            except RetryRequest:
                return False
            if not reply.items:
                return False
            dead = [m.QueueRetryItem(id=i.id, dead=True) for i in reply.items]
            await retried(lambda: retrier.retry("work", reply.partition, dead))
            return (await stats_total(a, "dead"))[0] == len(produced)

        await eventually(kill_some, DEADLINE, "every item dead-lettered")
    assert await stats_total(b, "work") == (0, 0)
    async with AsyncClient(b.url) as client:
        assert await retried(lambda: client.redrive("dead", "work")) == len(produced)
    assert await stats_total(c, "dead") == (0, 0)
    back = await drain(c, a, "work", len(produced))
    assert sorted(p for items in back.values() for p in items) == produced

    # One dedup id, produced through two nodes that each own partitions: stored once.
    spread = await owners(a, "work")
    assert {"node-0", "node-1"} <= set(spread.values())
    for server in (a, b, a):
        async with AsyncClient(server.url) as client:
            twice = [m.QueueProduceItem(utf8=f"once-{n}", dedup_id=f"d-{n}") for n in range(20)]
            await retried(lambda cl=client, t=twice: cl.produce("work", t))
    assert await stats_total(c, "work") == (20, 0)


async def test_forwarding_with_api_keys_and_a_cluster_secret(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str, tmp_path: Path
) -> None:
    key, auth = keyed_cluster(tmp_path)
    nodes = [
        await servers.astart(*node_args(etcd, cassandra_node, keyspace, "/auth", n), *auth) for n in range(2)
    ]
    async with AsyncClient(nodes[0].url, api_key=key) as client:
        await client.create_queue("jobs", partitions=1)
        owner = (await client.cluster_info("jobs")).partitions[0].owner
    other = nodes[0] if owner == "node-1" else nodes[1]
    async with AsyncClient(other.url, api_key=key) as client:
        await retried(lambda: client.produce("jobs", ["through the other node"]))
        reply = await retried(lambda: client.lease("jobs", batch_size=1, client_id="c", request_timeout="2s"))
        assert [i.bytes for i in reply.items] == [b"through the other node"]
        await client.complete("jobs", reply.partition, [i.id for i in reply.items])
    # Without a signature, a forwarded header is a client's claim like any other: refused.
    async with aiohttp.ClientSession() as session:
        body = b'{"queue_name": "jobs", "partition": 0, "request_timeout": "1s", "ids": ["x"]}'
        headers = {"Content-Type": "application/json", FORWARDED_HEADER: owner}
        async with session.post(other.url + "/v1/queue.complete", data=body, headers=headers) as resp:
            assert resp.status == 401
            assert (await resp.json())["message"] == "forwarded request is invalid; it has no signature"


async def test_a_killed_node_loses_nothing(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/crash")
    produced = await jobs_everywhere(nodes, partitions=8, lease_timeout="3s", count=400)
    # node-2 leases a batch from its own partitions and dies holding it.
    async with AsyncClient(nodes[2].url) as client:
        held = await retried(
            lambda: client.lease("jobs", batch_size=20, client_id="doomed", request_timeout="2s")
        )
    assert held.items
    kill9(nodes[2])
    survivors = nodes[:2]
    await members_are(survivors, 2)
    assert set((await owners(nodes[0], "jobs")).values()) == {"node-0", "node-1"}
    delivered = await drain(nodes[0], nodes[1], "jobs", len(produced))
    everything = sorted(p for items in delivered.values() for p in items)
    assert everything == produced, "every acknowledged item, the dead node's leased ones included"
    assert await stats_total(nodes[1], "jobs") == (0, 0)


async def test_join_and_leave_under_load(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/moves")
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("jobs", partitions=16, lease_timeout="1m")
    before = await owners(nodes[0], "jobs")
    acknowledged: list[str] = []
    stop = asyncio.Event()
    producing = [
        asyncio.create_task(keep_producing(nodes[n], f"p{n}", 5, acknowledged, stop)) for n in (0, 2)
    ]
    try:
        await eventually(lambda: _at_least(acknowledged, 100), DEADLINE, "producing")
        async with AsyncClient(nodes[0].url) as client:
            held = await retried(
                lambda: client.lease("jobs", batch_size=10, client_id="early", request_timeout="2s")
            )
        joined = await servers.astart(*node_args(etcd, cassandra_node, keyspace, "/moves", 3))
        nodes.append(joined)
        await members_are(nodes, 4)
        after_join = await owners(nodes[0], "jobs")
        moved = {p for p in before if after_join[p] != before[p]}
        assert moved and {after_join[p] for p in moved} == {"node-3"}, "only shares for the new node move"
        assert len(moved) <= 8
        seen = len(acknowledged)
        await eventually(lambda: _at_least(acknowledged, seen + 50), DEADLINE, "producing after the join")
        assert nodes[1].proc.poll() is None
        nodes[1].proc.send_signal(signal.SIGTERM)
        assert nodes[1].wait() == 0, nodes[1].describe()
        remaining = [nodes[0], nodes[2], nodes[3]]
        await members_are(remaining, 3)
        seen = len(acknowledged)
        await eventually(lambda: _at_least(acknowledged, seen + 50), DEADLINE, "producing after the leave")
    finally:
        stop.set()
        await asyncio.gather(*producing)
    # The lease taken before both moves is still the consumer's, wherever its partition went.
    async with AsyncClient(nodes[3].url) as client:
        await retried(lambda: client.complete("jobs", held.partition, [i.id for i in held.items]))
    delivered = await drain(nodes[3], nodes[2], "jobs", len(acknowledged) - len(held.items))
    everything = [p for items in delivered.values() for p in items] + [i.bytes.decode() for i in held.items]
    assert len(everything) == len(set(everything)), "nothing stored or delivered twice"
    assert sorted(everything) == sorted(acknowledged)
    assert await stats_total(nodes[0], "jobs") == (0, 0)


async def _at_least(items: list[str], count: int) -> bool:
    return len(items) >= count


async def test_an_etcd_outage_fails_safe_and_recovers(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/outage")
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("jobs", partitions=8, lease_timeout="1m")
    acknowledged: list[str] = []
    delivered: list[str] = []
    stopped = asyncio.Event()

    async def consumer() -> None:
        async with AsyncClient(nodes[2].url) as leaser, AsyncClient(nodes[0].url) as completer:
            while not stopped.is_set():
                try:
                    reply = await leaser.lease("jobs", batch_size=50, client_id="c", request_timeout="500ms")
                except RetryRequest:
                    continue
                if not reply.items:
                    continue
                ids = [i.id for i in reply.items]
                await retried(lambda p=reply.partition, i=ids: completer.complete("jobs", p, i))
                delivered.extend(i.bytes.decode() for i in reply.items)

    async def ready(server: ServerProcess) -> bool:
        async with aiohttp.ClientSession() as session, session.get(server.url + "/ready") as resp:
            return resp.status == 200

    tasks = [asyncio.create_task(keep_producing(nodes[n], f"p{n}", 1, acknowledged, stopped)) for n in (0, 1)]
    tasks.append(asyncio.create_task(consumer()))
    try:
        await eventually(lambda: _at_least(delivered, 50), DEADLINE, "working before the outage")
        # In a thread: stopping and starting etcd block for seconds, and this loop runs the clients, whose
        # replies would otherwise wait unread (a blocked test loop once passed for late replies).
        await asyncio.to_thread(etcd.stop)
        try:

            async def none_ready() -> bool:
                return not any([await ready(node) for node in nodes])

            # Within 2/3 of the lease TTL without renewals, every node stops serving its partitions.
            await eventually(none_ready, DEADLINE, "no node serves while etcd is down")
        finally:
            await asyncio.to_thread(etcd.start)

        async def all_ready() -> bool:
            return all([await ready(node) for node in nodes])

        await eventually(all_ready, DEADLINE, "every node serves again once etcd is back")
        seen = len(delivered)
        await eventually(lambda: _at_least(delivered, seen + 50), DEADLINE, "working after the outage")
    finally:
        stopped.set()
        await asyncio.gather(*tasks)
    rest = await drain(nodes[1], nodes[2], "jobs", len(acknowledged) - len(delivered))
    everything = delivered + [p for items in rest.values() for p in items]
    assert len(everything) == len(set(everything)), "nothing stored or delivered twice"
    assert sorted(everything) == sorted(acknowledged)


async def test_a_paused_owner_is_fenced_out_and_comes_back(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, "/fence")
    produced = await jobs_everywhere(nodes, partitions=6, lease_timeout="1m", count=120)
    paused = nodes[2]
    # node-2 leases from its own partitions, then freezes past its etcd lease.
    async with AsyncClient(paused.url) as client:
        held = await retried(
            lambda: client.lease("jobs", batch_size=5, client_id="frozen", request_timeout="2s")
        )
    assert held.items
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        await members_are(nodes[:2], 2)
        # The others claimed node-2's partitions with newer epochs and serve them, its leases included.
        delivered = await drain(nodes[0], nodes[1], "jobs", len(produced) - len(held.items))
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    # node-2 wakes up with stale epochs: storage refuses its writes, it hands its partitions off, joins
    # again, and takes them back with newer epochs of its own. The leases it held survived all of it.
    await members_are(nodes, 3)
    async with AsyncClient(nodes[0].url) as client:
        await retried(lambda: client.complete("jobs", held.partition, [i.id for i in held.items]))
    everything = [p for items in delivered.values() for p in items]
    assert len(everything) == len(set(everything)), "nothing delivered twice"
    assert sorted([*everything, *(i.bytes.decode() for i in held.items)]) == produced
    assert await stats_total(nodes[1], "jobs") == (0, 0)
