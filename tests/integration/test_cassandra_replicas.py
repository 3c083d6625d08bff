"""A Querator node on a three-node Cassandra cluster with replication factor 3 at the default LOCAL_QUORUM:
replica faults while producers and a consumer keep going.

- One replica killed: produce, lease and complete go on (a request in flight to the killed coordinator
  may answer 454, never 500).
- It comes back without the writes it missed (hinted handoff is off) and another replica is killed:
  quorum reads still find every item and every lease (the stale replica is outvoted by timestamp).
- Two replicas down: requests answer 454 (no quorum), and work goes on once they are back.

Through all of it no acknowledged item is lost.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest

from querator.client import AsyncClient
from querator.errors import QueratorError, outcome_unknown
from tests.cassandra_node import CassandraNode, cluster, wait_all_up

from .conftest import Servers, eventually, keep_producing
from .test_crash import DEADLINE, drain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PRODUCERS = 3
PROGRESS = 100
"""Items produced and delivered that count as 'work goes on'."""


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[CassandraNode]]:
    nodes = cluster(tmp_path_factory.mktemp("cassandra-rf3"), 3)
    try:
        nodes[0].start()  # the seed first: the others join through it
        for node in nodes[1:]:
            node.start()
        wait_all_up(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


# Long on purpose: one scenario of faults, step by step, whose order is the test. About 3 minutes with
# its three Cassandra nodes: slow, left out of CI's run (its budget), run with QUERATOR_TEST_SLOW=1.
@pytest.mark.slow
async def test_replica_faults_lose_no_acknowledged_item(  # noqa: C901, PLR0915
    servers: Servers, replicas: list[CassandraNode], keyspace: str
) -> None:
    first, second, third = replicas
    server = await servers.astart(
        "--storage",
        "cassandra",
        "--cassandra-hosts",
        ",".join(node.address for node in replicas),
        "--cassandra-port",
        str(first.cql_port),
        "--cassandra-keyspace",
        keyspace,
        "--cassandra-replication",
        "SimpleStrategy:3",
    )
    acked: set[str] = set()
    delivered: set[str] = set()
    produced: Counter[int] = Counter()  # replies by status code
    consumed: Counter[int] = Counter()
    unexpected: list[str] = []
    stop = asyncio.Event()

    async with AsyncClient(server.url) as client:
        await client.create_queue("replicas", lease_timeout="10s", expire_timeout="1h", partitions=4)

        def failed(what: str, e: QueratorError) -> None:
            consumed[e.code] += 1
            if e.code != 454:
                unexpected.append(f"{what}: {e.code} {e.message}")

        async def consume() -> None:
            while not stop.is_set():
                try:
                    reply = await client.lease("replicas", batch_size=50, client_id="c", request_timeout="1s")
                except QueratorError as e:  # 454: no quorum
                    failed("lease", e)
                    await asyncio.sleep(0.05)
                    continue
                if not reply.items:
                    continue
                payloads = {i.bytes.decode() for i in reply.items}
                try:
                    await client.complete("replicas", reply.partition, [i.id for i in reply.items])
                except QueratorError as e:
                    failed("complete", e)
                    if outcome_unknown(e):
                        # It may have been applied: then its items never come back to be counted. A
                        # complete known to have failed leaves them leased, to come back at lease expiry.
                        delivered.update(payloads)
                    await asyncio.sleep(0.05)
                else:
                    consumed[200] += 1
                    delivered.update(payloads)

        async def goes_on(what: str) -> None:
            acked_before, delivered_before, completed_before = len(acked), len(delivered), consumed[200]

            async def moved() -> bool:
                return (
                    len(acked) >= acked_before + PROGRESS
                    and len(delivered) >= delivered_before + PROGRESS
                    and consumed[200] > completed_before
                )

            await eventually(moved, DEADLINE, f"produce and complete {what}")

        async def refused(what: str) -> None:
            before = produced[454]

            async def more() -> bool:
                return produced[454] >= before + 10

            await eventually(more, DEADLINE, f"454 {what}")

        workers = [
            asyncio.create_task(keep_producing(client, "replicas", n, 10, acked, produced, stop, unexpected))
            for n in range(PRODUCERS)
        ]
        workers.append(asyncio.create_task(consume()))
        await goes_on("with every replica up")
        await asyncio.to_thread(third.stop)
        await goes_on(f"with {third.address} down")
        await asyncio.to_thread(third.start)
        await asyncio.to_thread(wait_all_up, replicas)
        await asyncio.to_thread(first.stop)
        await goes_on(f"with {first.address} down and {third.address} missing writes")
        await asyncio.to_thread(second.stop)
        await refused(f"with only {third.address} up")
        await asyncio.to_thread(first.start)
        await asyncio.to_thread(second.start)
        await goes_on("with every replica back")
        stop.set()
        await asyncio.gather(*workers)
        assert set(produced) | set(consumed) <= {200, 454}, (produced, consumed, unexpected[:20])
        rest = await drain(client, server, "replicas")
    missing = acked - delivered - {i.bytes.decode() for _, i in rest}
    assert missing == set(), (
        f"{len(missing)} acknowledged items lost: {sorted(missing)[:10]}\n{server.describe()}"
    )
