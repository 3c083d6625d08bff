"""A Querator node on a real Cassandra node: the restart and fencing scenarios of store_restarts.py
(restarts of either, fencing between two nodes), and tombstones:

- 200,000 items produced and completed through one partition: the next lease's read still touches only
  live rows (checked with Cassandra's query tracing) and Cassandra logs no tombstone warning.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from cassandra.cluster import Cluster
from cassandra.query import dict_factory

from querator.client import AsyncClient
from querator.clock import SystemClock
from querator.storage.cassandra import CassandraPartition, CassandraSettings, CassandraStore
from querator.storage.cassandra._statements import Statement
from querator.wire import messages as m
from tests.cassandra_node import CassandraNode
from tests.storage.contract import Part, item

from .conftest import Servers
from .store_restarts import (
    a_second_node_fences_the_first,
    restart_keeps_items_leases_and_scheduled,
    store_restart_under_load_loses_nothing,
)

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
    await restart_keeps_items_leases_and_scheduled(servers, cassandra_args(cassandra_node, keyspace))


async def test_cassandra_restart_under_load_loses_nothing_and_answers_454(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    args = cassandra_args(cassandra_node, keyspace)
    await store_restart_under_load_loses_nothing(servers, args, cassandra_node.stop, cassandra_node.start)


async def test_a_second_node_fences_the_first(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    await a_second_node_fences_the_first(servers, cassandra_args(cassandra_node, keyspace))


@pytest.fixture
def tracing_session(cassandra_node: CassandraNode) -> Iterator[object]:
    cluster = Cluster(["127.0.0.1"], port=cassandra_node.cql_port, protocol_version=5)
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


async def test_large_produces_at_once_and_a_large_import_are_stored(
    servers: Servers, cassandra_node: CassandraNode, keyspace: str
) -> None:
    """Cassandra refuses a request over 16 MiB. Six produces of 3.6 MB each, waiting together for one
    partition, were merged into one run of 21.6 MB, refused at every retry (454 and a failing partition);
    an import of 20 MB was one run too. Both now go in runs of at most 8 MB of payload
    (querator/engine/run_bytes.py)."""
    server = await servers.astart(*cassandra_args(cassandra_node, keyspace))
    async with AsyncClient(server.url) as client:
        await client.create_queue("big", lease_timeout="1m", expire_timeout="1h", partitions=1)
        payload = b"x" * 3_600_000
        produced = await asyncio.gather(*(client.produce("big", [payload], "30s") for _ in range(6)))
        assert len(produced) == 6
        pieces = [m.StorageItem(payload=b"y" * 1_000_000, source_id=f"s-{n}") for n in range(20)]
        imported = await client.import_items("big", 0, pieces)
        assert len(imported.items) == 20
        await client.reload("big")
        [logical] = (await client.stats("big")).logical_queues
        assert sum(p.total for p in logical.partitions) == 26


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
