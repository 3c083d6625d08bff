"""A Querator node on a real Cassandra node: restarts of either, fencing between two nodes, tombstones.

- SIGKILL of Querator keeps queued, leased and scheduled items (the leases still expire afterwards).
- Cassandra killed and restarted under load: no acknowledged item is lost, requests during the outage
  get 454 (never 500), and the same Querator process serves again once Cassandra is back.
- Two Querator processes on one keyspace: the later one claims the partition with a newer epoch, and
  the earlier one's writes are refused (454) from then on.
- 200,000 items produced and completed through one partition: the next lease's read still touches only
  live rows (checked with Cassandra's query tracing) and Cassandra logs no tombstone warning.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cassandra.cluster import Cluster
from cassandra.query import dict_factory

from querator.client import AsyncClient
from querator.clock import SystemClock
from querator.errors import RetryRequest
from querator.storage.cassandra import CassandraPartition, CassandraSettings, CassandraStore
from querator.storage.cassandra._statements import Statement
from querator.wire import messages as m
from tests.cassandra_node import CassandraNode
from tests.storage.contract import Part, item

from .conftest import Held, Servers, eventually, held, keep_producing, kill9
from .test_crash import DEADLINE, drain

PRODUCERS = 4
THROUGH = 200_000
"""Items produced and completed through one partition before the tombstone check."""


def cassandra_args(node: CassandraNode, keyspace: str) -> tuple[str, ...]:
    return (
        "--storage",
        "cassandra",
        "--cassandra-hosts",
        "127.0.0.1",
        "--cassandra-port",
        str(node.cql_port),
        "--cassandra-keyspace",
        keyspace,
        "--cassandra-consistency",
        "ONE",
    )


async def test_querator_restart_keeps_items_leases_and_scheduled(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    args = cassandra_args(cassandra_node, keyspace)
    server = await servers.astart(*args)
    queued = [f"queued-{i}" for i in range(10)]
    scheduled = ["scheduled-0", "scheduled-1"]
    async with AsyncClient(server.url) as client:
        await client.create_queue("work", lease_timeout="2s", expire_timeout="1h", partitions=2)
        await client.produce("work", queued)
        lease = await client.lease("work", batch_size=4, client_id="doomed", request_timeout="5s")
        leased = [i.bytes.decode() for i in lease.items]
        enqueue_at = datetime.now(UTC) + timedelta(seconds=3)
        await client.produce("work", [m.QueueProduceItem(utf8=p, enqueue_at=enqueue_at) for p in scheduled])
    kill9(server)

    restarted = await servers.astart(*args)
    async with AsyncClient(restarted.url) as client:
        totals = await held(client, "work")
        assert totals == Held(len(queued), len(leased), len(scheduled)), restarted.describe()
        delivered = await drain(client, restarted, "work", until=len(queued) + len(scheduled))
        assert await held(client, "work") == Held()
    payloads = [i.bytes.decode() for _, i in delivered]
    assert Counter(payloads) == Counter(queued + scheduled)
    attempts = {i.bytes.decode(): i.attempts for _, i in delivered}
    assert attempts == {p: 2 if p in leased else 1 for p in queued + scheduled}


async def test_cassandra_restart_under_load_loses_nothing_and_answers_454(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    server = await servers.astart(*cassandra_args(cassandra_node, keyspace))
    acked: set[str] = set()
    codes: Counter[int] = Counter()
    stop = asyncio.Event()
    async with AsyncClient(server.url) as client:
        await client.create_queue("load", lease_timeout="1m", expire_timeout="1h", partitions=2)

        producers = [
            asyncio.create_task(keep_producing(client, "load", n, 5, acked, codes, stop))
            for n in range(PRODUCERS)
        ]
        await eventually(lambda: _true(len(acked) >= 200), DEADLINE, "items acknowledged before the outage")
        await asyncio.to_thread(cassandra_node.stop)
        before = codes[454]
        await eventually(lambda: _true(codes[454] > before), DEADLINE, "454 during the outage")
        with pytest.raises(RetryRequest):  # queue metadata comes from Cassandra too
            await client.list_queues()
        await asyncio.to_thread(cassandra_node.start)
        recovered = codes[200]
        await eventually(lambda: _true(codes[200] > recovered + 20), 90, "produce works again")
        stop.set()
        await asyncio.gather(*producers)
        assert set(codes) <= {200, 454}, codes
        delivered = await drain(client, server, "load")
    assert server.running(), "Querator was not restarted"
    missing = acked - {i.bytes.decode() for _, i in delivered}
    assert missing == set(), f"{len(missing)} acknowledged items lost: {sorted(missing)[:10]}"


async def _true(value: bool) -> bool:
    return value


async def test_a_second_node_fences_the_first(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    args = cassandra_args(cassandra_node, keyspace)
    first = await servers.astart(*args)
    async with AsyncClient(first.url) as a:
        await a.create_queue("shared", lease_timeout="1m", expire_timeout="1h", partitions=1)
        await a.produce("shared", ["from-first"])
        second = await servers.astart(*args)  # a later start is a newer epoch
        async with AsyncClient(second.url) as b:
            await b.produce("shared", ["from-second"])  # claims the partition
            for _ in range(2):  # refused, and it stays refused: the first node stopped serving it
                with pytest.raises(RetryRequest):
                    await a.produce("shared", ["lost"], request_timeout="2s")
            reply = await b.lease("shared", batch_size=10, client_id="c", request_timeout="5s")
            assert [i.bytes.decode() for i in reply.items] == ["from-first", "from-second"]
    assert "stale owner" in first.stderr()


@pytest.fixture
def tracing_session(cassandra_node: CassandraNode) -> Iterator[object]:
    cluster = Cluster(["127.0.0.1"], port=cassandra_node.cql_port, protocol_version=5)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


async def test_the_head_read_meets_no_tombstones_after_200k_items(
    cassandra_node: CassandraNode, keyspace: str, tracing_session: object
) -> None:
    settings = CassandraSettings(port=cassandra_node.cql_port, keyspace=keyspace, consistency="ONE")
    store = CassandraStore(settings, 1, SystemClock().now)
    await store.open()
    try:
        part = Part(store.partition("deep", 0))
        batch = 2000
        for n in range(0, THROUGH, batch):
            await part.produce(*(item(str(n + k)) for k in range(batch)))
            [got] = await part.lease(batch)
            assert await part.complete(*(i.id for i in got)) is None
        await part.produce(*(item(f"next-{k}") for k in range(10)))
        assert [i.payload for i in await part.head(10)] == [f"next-{k}".encode() for k in range(10)]

        partition = store.partition("deep", 0)
        assert isinstance(partition, CassandraPartition)
        index = partition._index
        assert index is not None
        cursor, segment = index.meta.cursor, index.segment_of(index.meta.cursor + "\x00")
        upto = index.committed_end(segment)
        assert len(index.segment_numbers) <= 3, "drained segments are dropped"
    finally:
        await store.close()

    # The read a lease does next, traced: it starts at the cursor, so it touches no dead row.
    session = tracing_session
    session.row_factory = dict_factory  # type: ignore[attr-defined]
    statement = session.prepare(Statement.ITEMS_AFTER.cql(keyspace))  # type: ignore[attr-defined]
    result = session.execute(statement, ("deep", 0, segment, cursor, upto, 1000), trace=True)  # type: ignore[attr-defined]
    assert [row["payload"] for row in result] == [f"next-{k}".encode() for k in range(10)]
    events = [e.description for e in result.get_query_trace(max_wait_sec=10).events]
    reads = [re.fullmatch(r"Read (\d+) live rows and (\d+) tombstone cells", e) for e in events]
    assert [(int(r[1]), int(r[2])) for r in reads if r] == [(10, 0)], events
    log = cassandra_node.log().splitlines()
    warnings = [line for line in log if line.startswith("WARN") and "tombstone" in line]
    assert warnings == []
