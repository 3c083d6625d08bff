"""Faults on a three-node cluster (real etcd, one real Cassandra, three ``querator serve`` processes)
under the mixed workload: nothing acknowledged is lost, nothing unexpected appears, nothing is delivered
again after an acknowledged complete, nothing is stranded.

The workload's clients talk to all three nodes; the fault hits node 2 (or what all nodes share):

- ``kill -9`` of node 2, restarted on the same port: the others take its partitions over meanwhile.
- SIGSTOP of node 2 past its etcd lease, then SIGCONT: it wakes up with stale epochs and is fenced.
- etcd restarted: every node stops serving until its membership is back.
- Cassandra killed and restarted: every node answers 454 until it is back.
- Node 2 isolated by a network partition (its own network namespace, see ``island.py``): no etcd, no
  peers, no Cassandra, no clients.
- Node 2 cut from etcd, its peers and its clients but not from Cassandra: the split-brain case, where
  only the epoch fence keeps the old owner from writing after the others took its partitions.

At one item per request (every run a plain commit acknowledged by the shared epoch read, ADR 0038),
with no delivery allowed to overlap a lease:

- A ring change under load: a fourth node joins, takes its share of the partitions, and leaves
  (SIGTERM), each move a takeover by a new owner while the old one's runs may still be in flight.
- CPU starvation: node 2 is stopped in bursts, some past its etcd lease, running only a fraction of a
  second between them, so a new owner takes its partitions over while it still gets to run now and then.

Each scenario runs the workload, applies the fault, heals, waits until the three nodes agree on the
membership again, runs the workload a while longer, stops it, drains the queue and runs the checker.
``RELIABILITY_RUNS=n`` repeats every scenario n times (the full matrix of docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from querator.client import AsyncClient
from tests.cassandra_node import CassandraNode
from tests.integration.conftest import ServerProcess, Servers, free_port, kill9, terminate
from tests.integration.etcd_server import EtcdServer
from tests.integration.test_cluster_routing import LEASE_TTL, members_are, node_args

from .checker import check, trace
from .history import History, Workload, drain
from .island import ISLAND, PEERS, STORAGE, Island
from .test_faults import RUNS

RUN = 3.0
"""Seconds of workload before the fault and after the cluster has recovered."""
OUTAGE = 5.0
"""Seconds a pause or a partition lasts: more than twice the nodes' etcd lease TTL (2 s)."""
RECOVERY = 90.0
"""Seconds the cluster may take to agree on its membership again after the fault healed."""
LEASE_S = 2.0
"""The queue's lease timeout."""
STARVED = 8.0
"""Seconds node 2 runs only in short slices between stops."""


@dataclass
class Cluster:
    """Three nodes; with an ``island`` node 2 lives in it and the others listen where it reaches them."""

    servers: Servers
    etcd: EtcdServer
    cassandra: CassandraNode
    keyspace: str
    prefix: str
    island: Island | None = None
    nodes: list[ServerProcess] = field(default_factory=list)

    async def start(self) -> None:
        self.nodes = [await self.start_node(n) for n in range(3)]
        await members_are(self.nodes, 3)

    async def start_node(self, n: int, port: int | None = None) -> ServerProcess:
        args = node_args(self.etcd, self.cassandra, self.keyspace, self.prefix, n)
        if self.island is None:
            return await self.servers.astart(*args, port=port)
        port = port or free_port()
        if n != 2:
            where = ("--address", f"0.0.0.0:{port}", "--advertise-address", f"{PEERS}:{port}")
            return await self.servers.astart(*args, *where, port=port, address_flag=False)
        # The island reaches etcd and Cassandra through the link; later flags override node_args'.
        where = (
            "--cluster", f"etcd://{PEERS}:{self.etcd.client_port}{self.prefix}",
            "--cassandra-hosts", STORAGE,
            "--address", f"{ISLAND}:{port}", "--advertise-address", f"{ISLAND}:{port}",
        )  # fmt: skip
        return await self.servers.astart(
            *args, *where, port=port, address_flag=False, host=ISLAND, prefix=Island.prefix
        )


Fault = Callable[[Cluster], Awaitable[None]]


async def kill9_and_restart(cluster: Cluster) -> None:
    victim = cluster.nodes[2]
    kill9(victim)
    cluster.nodes[2] = await cluster.start_node(2, port=victim.port)


async def pause_past_the_etcd_lease(cluster: Cluster) -> None:
    victim = cluster.nodes[2]
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(OUTAGE)  # the fault itself: a process that stops running for a while
    finally:
        os.kill(victim.pid, signal.SIGCONT)


async def restart_etcd(cluster: Cluster) -> None:
    await asyncio.to_thread(cluster.etcd.restart)


async def restart_cassandra(cluster: Cluster) -> None:
    await asyncio.to_thread(cluster.cassandra.stop)
    await asyncio.to_thread(cluster.cassandra.start)


async def isolate(cluster: Cluster) -> None:
    await _partition(cluster, PEERS, STORAGE)


async def cut_from_etcd_and_peers(cluster: Cluster) -> None:
    await _partition(cluster, PEERS)


async def _partition(cluster: Cluster, *addresses: str) -> None:
    assert cluster.island is not None
    cluster.island.partition(*addresses)
    try:
        await asyncio.sleep(OUTAGE)  # the fault itself: how long the network stays split
    finally:
        cluster.island.heal()


async def join_and_leave(cluster: Cluster) -> None:
    joiner = await cluster.start_node(3)
    await asyncio.wait_for(members_are([*cluster.nodes, joiner], 4), RECOVERY)
    await asyncio.sleep(RUN)  # workload time with the fourth node owning its share
    assert await asyncio.to_thread(terminate, joiner) == 0, joiner.describe()


async def starve_in_bursts(cluster: Cluster) -> None:
    victim = cluster.nodes[2]
    rng = random.Random(2)
    loop = asyncio.get_running_loop()
    until = loop.time() + STARVED
    while loop.time() < until:
        os.kill(victim.pid, signal.SIGSTOP)
        try:
            # The fault itself: stops around the etcd lease's 2 s, some shorter, some past it.
            await asyncio.sleep(rng.uniform(0.5, 3.0))
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        await asyncio.sleep(rng.uniform(0.05, 0.3))  # a slice of CPU between stops


PARTITIONS = (isolate, cut_from_etcd_and_peers)


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize(
    "fault",
    [
        kill9_and_restart,
        pause_past_the_etcd_lease,
        restart_etcd,
        restart_cassandra,
        isolate,
        cut_from_etcd_and_peers,
    ],
)
async def test_no_loss_in_a_cluster_under_fault(
    servers: Servers,
    etcd: EtcdServer,
    cassandra_node: CassandraNode,
    keyspace: str,
    request: pytest.FixtureRequest,
    fault: Fault,
    run: int,
) -> None:
    island: Island | None = request.getfixturevalue("island") if fault in PARTITIONS else None
    cluster = Cluster(servers, etcd, cassandra_node, keyspace, f"/faults-{fault.__name__}-{run}", island)
    await scenario(cluster, fault, batch=5)


@pytest.mark.slow  # 50-80 s each: RELIABILITY_RUNS=3 pytest tests/reliability/test_cluster_faults.py -m slow
@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize("fault", [join_and_leave, starve_in_bursts])
async def test_no_loss_and_no_overlapping_lease_at_one_item_per_request(
    servers: Servers,
    etcd: EtcdServer,
    cassandra_node: CassandraNode,
    keyspace: str,
    fault: Fault,
    run: int,
) -> None:
    cluster = Cluster(servers, etcd, cassandra_node, keyspace, f"/batch1-{fault.__name__}-{run}")
    await scenario(cluster, fault, batch=1, lease_s=LEASE_S)


async def scenario(cluster: Cluster, fault: Fault, batch: int, lease_s: float | None = None) -> None:
    """Runs the workload with ``batch`` items per produce and lease, applies the fault, recovers, drains
    and checks (that no delivery overlapped a lease too, given ``lease_s``)."""
    await cluster.start()
    assert LEASE_TTL == "2s", "OUTAGE is chosen to outlast the etcd lease"
    async with AsyncClient(cluster.nodes[0].url) as client:
        await client.create_queue("work", lease_timeout=f"{LEASE_S:g}s", expire_timeout="1h", partitions=6)
    history = History()
    workload = Workload(
        [n.url for n in cluster.nodes],
        "work",
        history,
        producers=3,
        consumers=3,
        batch=batch,
        lease_batch=batch,
        retry=0.05,
        abandon=0.05,
    )
    running = asyncio.create_task(workload.run())
    try:
        await asyncio.sleep(RUN)  # workload time: the scenario is "run, fault, recover, run"
        await fault(cluster)
        await asyncio.wait_for(members_are(cluster.nodes, 3), RECOVERY)
        await asyncio.sleep(RUN)
    finally:
        workload.stop.set()
        await running
    stranded = await drain(cluster.nodes[0].url, "work", history)
    report = check(history, stranded, lease_s)
    print(f"cluster {fault.__name__} at batch {batch}: {report.summary()}")
    assert report.acknowledged > 0 and report.deliveries > 0
    problems = report.lost + report.unexpected + report.within_lease
    assert report.problems() == [], f"{report.summary()}\n{trace(history, problems)}"
