"""Faults on a three-node cluster on PostgreSQL (real etcd, one real PostgreSQL, three ``querator serve``
processes) under the mixed workload, as ``test_cluster_faults.py`` runs them on Cassandra: nothing
acknowledged is lost, nothing unexpected appears, nothing is delivered again after an acknowledged
complete, nothing is stranded.

- ``kill -9`` of node 2, restarted on the same port: the others take its partitions over meanwhile.
- SIGSTOP of node 2 past its etcd lease, then SIGCONT: it wakes up with stale epochs and is fenced by
  PostgreSQL's partition rows (docs/adr/0045).
- etcd restarted: every node stops serving until its membership is back.
- PostgreSQL stopped and started again: every node answers 454 until it is back.

The network partitions of the Cassandra suite are not run here: the test server listens on loopback only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from querator.client import AsyncClient
from querator.storage.postgres import PostgresSettings
from tests.integration.conftest import ServerProcess, Servers
from tests.integration.etcd_server import EtcdServer
from tests.integration.test_cluster_routing import LEASE_TTL, members_are
from tests.integration.test_postgres import postgres_args
from tests.postgres_node import PostgresNode

from .checker import check, trace
from .history import History, Workload, drain
from .test_cluster_faults import (
    RECOVERY,
    RUN,
    Fault,
    kill9_and_restart,
    pause_past_the_etcd_lease,
    restart_etcd,
)
from .test_faults import RUNS

pytestmark = pytest.mark.postgres


@dataclass
class PostgresCluster:
    """Three nodes sharing one PostgreSQL schema; what the faults of ``test_cluster_faults`` need."""

    servers: Servers
    etcd: EtcdServer
    postgres: PostgresNode
    settings: PostgresSettings
    prefix: str
    nodes: list[ServerProcess] = field(default_factory=list)

    async def start(self) -> None:
        self.nodes = [await self.start_node(n) for n in range(3)]
        await members_are(self.nodes, 3)

    async def start_node(self, n: int, port: int | None = None) -> ServerProcess:
        args = (
            *postgres_args(self.settings),
            "--cluster", self.etcd.cluster_url(self.prefix), "--node-id", f"node-{n}",
            "--etcd-lease-ttl", LEASE_TTL, "--cluster-grace-period", "0s",
        )  # fmt: skip
        return await self.servers.astart(*args, port=port)


async def restart_postgres(cluster: PostgresCluster) -> None:
    await asyncio.to_thread(cluster.postgres.stop)
    await asyncio.to_thread(cluster.postgres.start)


@pytest.mark.parametrize("run", range(RUNS))
@pytest.mark.parametrize(
    "fault", [kill9_and_restart, pause_past_the_etcd_lease, restart_etcd, restart_postgres]
)
async def test_no_loss_in_a_postgres_cluster_under_fault(
    servers: Servers,
    etcd: EtcdServer,
    postgres_node: PostgresNode,
    postgres_settings: PostgresSettings,
    fault: Fault,
    run: int,
) -> None:
    prefix = f"/postgres-faults-{fault.__name__}-{run}"
    cluster = PostgresCluster(servers, etcd, postgres_node, postgres_settings, prefix)
    await cluster.start()
    async with AsyncClient(cluster.nodes[0].url) as client:
        await client.create_queue("work", lease_timeout="2s", expire_timeout="1h", partitions=6)
    history = History()
    workload = Workload(
        [n.url for n in cluster.nodes], "work", history, producers=3, consumers=3, retry=0.05, abandon=0.05
    )
    running = asyncio.create_task(workload.run())
    try:
        await asyncio.sleep(RUN)  # workload time: the scenario is "run, fault, recover, run"
        await fault(cluster)  # the faults use only nodes, start_node and etcd, which it has
        await asyncio.wait_for(members_are(cluster.nodes, 3), RECOVERY)
        await asyncio.sleep(RUN)
    finally:
        workload.stop.set()
        await running
    stranded = await drain(cluster.nodes[0].url, "work", history)
    report = check(history, stranded)
    print(f"postgres cluster {fault.__name__}: {report.summary()}")
    assert report.acknowledged > 0 and report.deliveries > 0
    assert report.problems() == [], f"{report.summary()}\n{trace(history, report.lost + report.unexpected)}"
