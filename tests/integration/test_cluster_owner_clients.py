"""Clients that reach owners (docs/adr/0040-clients-reach-partition-owners.md) against three real
``querator serve --cluster`` processes on a real etcd (sqlite storage, each node its own): the Python
client, a worker and a durable app with ``reach_owners`` send their requests straight to the owners, so
the members forward fewer than 5% of them (counted by ``querator_cluster_forwards_total``, never timed);
a member that leaves costs no request.

The clients are pointed at a member that owns no partition of their queues, as a load balancer may pick:
without ``reach_owners`` it forwards every one of their requests (docs/cluster.md, "Routing"). The
workloads leave items in every owner's partitions, so that a lease never asks the other owners for items
(lease balancing, a forward of its own), except the durable app's, whose lease forwards are counted apart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from querator.client import AsyncClient
from querator.cluster.ring import Ring
from querator.durable import Context, Durable
from querator.durable._app import QUEUE_EXPIRE_TIMEOUT
from querator.worker import Worker

from .conftest import ServerProcess, Servers, eventually, terminate
from .etcd_server import EtcdServer
from .test_cluster_metrics import members_are, scrape

pytestmark = pytest.mark.integration

DEADLINE = 60.0
PARTITIONS = 6
MEMBERS = ["node-0", "node-1", "node-2"]
FORWARDED_AT_MOST = 0.05


def node_args(etcd: EtcdServer, n: int, tmp_path: Path, prefix: str) -> tuple[str, ...]:
    return (
        "--storage", "sqlite", "--data-dir", str(tmp_path / f"d{n}"),
        "--cluster", etcd.cluster_url(prefix), "--node-id", f"node-{n}",
        "--etcd-lease-ttl", "10s", "--cluster-grace-period", "0s",
    )  # fmt: skip


def far_queue(prefix: str) -> str:
    """A queue name whose partitions the ring gives to node-1 and node-2 and none to node-0, the member
    the clients are pointed at: there, without reaching owners, each of their requests is forwarded."""
    ring = Ring(MEMBERS, 1)
    for n in range(1000):
        name = f"{prefix}{n}"
        if {ring.owner(name, p) for p in range(PARTITIONS)} == {"node-1", "node-2"}:
            return name
    raise AssertionError("no queue name leaves node-0 out")


async def cluster(servers: Servers, etcd: EtcdServer, tmp_path: Path, prefix: str) -> list[ServerProcess]:
    nodes = [await servers.astart(*node_args(etcd, n, tmp_path, prefix)) for n in range(3)]
    await members_are(nodes, 3)
    return nodes


async def create_everywhere(nodes: list[ServerProcess], queue: str) -> None:
    """Each node's own sqlite keeps its own settings: the queue is made on each."""
    for node in nodes:
        async with AsyncClient(node.url) as client:
            await client.create_queue(queue, partitions=PARTITIONS, lease_timeout="1m")


QUEUE_ROUTES = tuple(f"/v1/queue.{r}" for r in ("produce", "lease", "complete", "retry", "renew"))
SETTLING = ("/v1/queue.complete", "/v1/queue.retry", "/v1/queue.renew")
STARTS = 10


async def counts(nodes: list[ServerProcess], routes: tuple[str, ...] = QUEUE_ROUTES) -> tuple[float, float]:
    """The clients' requests of ``routes`` and how many of them the members forwarded: every request a
    member got, less those another member forwarded to it."""
    received = forwarded = 0.0
    for node in nodes:
        for (name, labels), v in (await scrape(node)).items():
            route = dict(labels).get("route")
            if route not in routes:
                continue
            if name == "querator_request_duration_seconds_count":
                received += v
            elif name == "querator_cluster_forwards_total":
                forwarded += v
    return received - forwarded, forwarded


async def test_the_client_sends_its_requests_to_the_owners(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    nodes = await cluster(servers, etcd, tmp_path, "/owners-client")
    queue = far_queue("oc")
    await create_everywhere(nodes, queue)
    async with AsyncClient(nodes[0].url, reach_owners=True) as client:
        for n in range(60):
            await client.produce(queue, [f"{n}-{i}" for i in range(10)])
        leased = 0
        for _ in range(20):  # a third of the items: every owner's partitions keep some
            lease = await client.lease(queue, batch_size=10, request_timeout="5s")
            ids = [i.id for i in lease.items]
            await client.renew(queue, lease.partition, ids)
            await client.complete(queue, lease.partition, ids)
            leased += len(ids)
        stats = await client.stats(queue)
    assert leased == 200
    assert sum(p.total for lq in stats.logical_queues for p in lq.partitions) == 400
    requests, forwarded = await counts(nodes)
    assert requests == 60 + 3 * 20
    assert forwarded <= FORWARDED_AT_MOST * requests


async def test_a_member_that_left_costs_no_request(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    nodes = await cluster(servers, etcd, tmp_path, "/owners-leave")
    queue = far_queue("ol")
    await create_everywhere(nodes, queue)
    async with AsyncClient(nodes[0].url, reach_owners=True) as client:
        await client.produce(queue, ["before"])  # the client has read the map with node-2 in it
        assert terminate(nodes[2]) == 0
        await members_are(nodes[:2], 2)
        # node-2's items went with its own sqlite; every request from now on still succeeds, the first
        # ones sent to node-2's address through the endpoint.
        for n in range(30):
            await client.produce(queue, [f"after-{n}"])
        done = 0
        while done < 30:
            lease = await client.lease(queue, batch_size=10, request_timeout="5s")
            if lease.items:  # "before" too, when it was not node-2's
                await client.complete(queue, lease.partition, [i.id for i in lease.items])
            done += sum(i.bytes.startswith(b"after-") for i in lease.items)
    assert done == 30


async def test_a_worker_sends_its_requests_to_the_owners(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    nodes = await cluster(servers, etcd, tmp_path, "/owners-worker")
    queue = far_queue("ow")
    await create_everywhere(nodes, queue)
    worker = Worker(nodes[0].url, concurrency=4, reach_owners=True)
    ran: list[int] = []

    @worker.task(queue=queue)
    async def record(n: int) -> None:
        ran.append(n)
        if len(ran) == 150:  # half: every owner's partitions keep items, no lease asks elsewhere
            worker.stop()

    for n in range(0, 300, 10):
        await record.enqueue_many([((k,), {}) for k in range(n, n + 10)])
    assert (await counts(nodes))[1] == 0  # the enqueues went to owners
    await asyncio.wait_for(worker.run(handle_signals=False), DEADLINE)
    await worker.close()
    assert len(ran) >= 150
    requests, forwarded = await counts(nodes)
    assert requests >= 30 + len(ran) / 4  # the enqueues, and a lease and complete for every few items
    assert forwarded <= FORWARDED_AT_MOST * requests


async def test_a_durable_app_sends_its_queue_requests_to_the_owners(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    nodes = await cluster(servers, etcd, tmp_path, "/owners-durable")
    queue = far_queue("od")
    for node in nodes:  # the app's queue as the app makes it, on each node's own store
        async with AsyncClient(node.url) as client:
            await client.create_queue(
                queue,
                partitions=PARTITIONS,
                lease_timeout="30s",
                max_attempts=0,
                expire_timeout=QUEUE_EXPIRE_TIMEOUT,
            )
    app = Durable(nodes[0].url, queue=queue, concurrency=4, reach_owners=True)

    @app.step()
    async def double(x: int) -> int:
        return 2 * x

    @app.workflow()
    async def doubled(ctx: Context, x: int) -> int:
        # Dispatched: each step is a task item the app produces, leases and completes (the activations'
        # completes go with the turns' endings, docs/adr/0070, so only steps make the app settle).
        (result,) = await ctx.gather(ctx.run(double, x))
        return int(result)

    async def all_done() -> bool:
        return all([await app.handle(f"w{n}").result(timeout="1s") == 2 * n for n in range(STARTS)])

    running = asyncio.create_task(app.run(handle_signals=False))
    try:
        for n in range(STARTS):
            await app.start(doubled, n, workflow_id=f"w{n}")
        await eventually(all_done, DEADLINE, "every workflow finished")
    finally:
        app.worker.stop()
        await asyncio.wait_for(running, DEADLINE)
        await app.close()
    requests, _ = await counts(nodes)
    assert requests >= 2 * STARTS  # each workflow's steps produced, leased and completed
    settles, settles_forwarded = await counts(nodes, SETTLING)
    assert settles > 0  # the steps' completes (batched), sent by the app
    # The member that stores a turn's ending completes its activation (docs/adr/0070): node-0 owns no
    # partition of the queue and forwards that complete, once for each of a workflow's two turns (the
    # one that dispatches its step, the one that returns). The app's own settles go to the owners.
    assert settles_forwarded <= FORWARDED_AT_MOST * requests + 2 * STARTS
    # The member that got workflows.start produces the first activation itself, and the member that
    # recorded the step's end the second: node-0 owns no partition of the queue and forwards both
    # (docs/adr/0040, Consequences). What the app produces (the steps) goes straight to an owner. The
    # app's queue runs dry, and its waiting leases then ask the other owners for items (lease
    # balancing, not a request sent to the wrong member): not counted here.
    produces, produces_forwarded = await counts(nodes, ("/v1/queue.produce",))
    assert produces > 0
    assert produces_forwarded <= 2 * STARTS


async def test_the_spark_sink_addresses_the_owners(
    servers: Servers, etcd: EtcdServer, tmp_path: Path
) -> None:
    """The sink's tasks (``write_rows``, as ``foreachPartition`` runs it; no Spark needed to call it) with
    ``addressNodes`` produce at the owners only."""
    pytest.importorskip("pyspark")
    from pyspark.sql import Row

    from querator.spark._config import SinkConfig
    from querator.spark._task import TaskIdentity, write_rows

    nodes = await cluster(servers, etcd, tmp_path, "/owners-spark")
    queue = far_queue("os")
    await create_everywhere(nodes, queue)
    config = SinkConfig.from_options(
        {"endpoint": nodes[0].url, "queue": queue, "addressNodes": "true", "batchSize": "50"}
    )
    for task in range(6):  # each task addresses its own node of the owners
        rows = [Row(payload=f"{task}-{n}") for n in range(200)]
        totals = await asyncio.to_thread(write_rows, config, TaskIdentity(task, 0, 0, f"w-{task}-"), rows)
        assert totals.items == 200
    requests, forwarded = await counts(nodes)
    assert requests == 6 * 200 / 50
    assert forwarded <= FORWARDED_AT_MOST * requests
