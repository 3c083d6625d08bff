"""The schedules soak of issue 26 (docs/schedules.md): a schedule firing every second on a three-node
cluster (real etcd and Cassandra) while its owner is killed with SIGKILL and started again, round after
round: each round moves the schedule to another node and back. At the end every second from the first
tick to the last has exactly one item (catch-up ``all``), checked by the tick time in its reference.

CI runs one short pass (``SCHEDULE_SOAK_S``, default 30 seconds); ``SCHEDULE_SOAK_S=600`` is the full
ten-minute soak.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

from querator.client import AsyncClient
from querator.errors import RetryRequest
from querator.wire import messages as m
from tests.cassandra_node import CassandraNode
from tests.integration.conftest import ServerProcess, Servers, kill9
from tests.integration.etcd_server import EtcdServer
from tests.integration.test_cluster_routing import members_are, node_args, start_cluster
from tests.integration.test_schedules import SCHEDULE, assert_each_tick_once, fired_past, references

SOAK_S = float(os.environ.get("SCHEDULE_SOAK_S", "30"))
STEADY = timedelta(seconds=5)
"""How far the schedule fires on after each kill and each restart before the next step."""
PREFIX = "/schedule-soak"

pytestmark = pytest.mark.integration


async def info_from_any(nodes: list[ServerProcess]) -> m.ScheduleInfo:
    for node in nodes:
        try:
            async with AsyncClient(node.url) as client:
                return await client.schedule_info(SCHEDULE)
        except (RetryRequest, ConnectionError):
            continue
    raise AssertionError("no node answers schedules.info")


@pytest.mark.timeout(SOAK_S + 300)
async def test_a_schedule_fires_each_tick_once_through_kills_and_owner_changes(
    servers: Servers, etcd: EtcdServer, cassandra_node: CassandraNode, keyspace: str
) -> None:
    nodes = await start_cluster(servers, etcd, cassandra_node, keyspace, PREFIX)
    async with AsyncClient(nodes[0].url) as client:
        await client.create_queue("ticks", lease_timeout="1m")
        created = await client.create_schedule(
            SCHEDULE, "* * * * * *", "ticks", catch_up="all", catch_up_limit=1000
        )
    assert created.next_tick is not None
    await fired_past(nodes[0], created.next_tick + STEADY)
    rounds = 0
    ends = time.monotonic() + SOAK_S
    while rounds == 0 or time.monotonic() < ends:
        before = await info_from_any(nodes)
        owner = int(before.owner.removeprefix("node-"))
        kill9(nodes[owner])
        survivors = [node for n, node in enumerate(nodes) if n != owner]
        await members_are(survivors, len(survivors))
        moved = await info_from_any(survivors)
        assert moved.owner != before.owner and moved.last_tick is not None
        await fired_past(survivors[0], moved.last_tick + STEADY)
        nodes[owner] = await servers.astart(*node_args(etcd, cassandra_node, keyspace, PREFIX, owner))
        await members_are(nodes, len(nodes))
        back = await info_from_any(nodes)
        assert back.owner == before.owner and back.last_tick is not None
        await fired_past(nodes[owner], back.last_tick + STEADY)
        rounds += 1
    async with AsyncClient(nodes[0].url) as client:
        await client.pause_schedule(SCHEDULE)
    ticks = assert_each_tick_once(await references(nodes[0]))
    assert ticks[0] == created.next_tick
    print(f"{len(ticks)} ticks, {rounds} owner kills, each tick once")
